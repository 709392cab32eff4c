"""Slurm's configuration files and accounting setup, rendered from the site spec.

Pure: no pulumi, no I/O. Everything a file names (hosts, ports, users, paths) comes from the site spec, so the
real slurmctld, slurmd and slurmdbd that the tests start on one machine run the files `gpuctl plan --out` wrote for a
test stack that names that machine's addresses and folders (tests/harness/slurm_cluster.py), never an edited copy.

Option semantics cite the Slurm 22.05 man pages (Debian 12 ships slurm-wlm 22.05.8):
slurm.conf(5), gres.conf(5), cgroup.conf(5), slurmdbd.conf(5), sacctmgr(1), also at
https://slurm.schedmd.com/archive/slurm-22.05.8/.
"""

import math
import shlex
from collections.abc import Iterator

from components.scheduling.preemption import (
    KILL_WAIT_S,
    PREEMPTED_GRACE_S,
    inference_preempts,
    preempted_qos,
    slurm_qos,
    team_qos,
)
from components.site.catalog import gres_type
from components.site.problems import Problem
from components.site.site import SLURM_POOLS, Node, NodeGroup, Pool, Site
from components.site.wellknown import PLATFORM_ACCOUNT
from components.slurm.containers import PLUGSTACK
from components.slurm.scripts import epilog_path, prolog_path

PARTITION_ROLE = {Pool.SLURM: "train", Pool.FLEX: "flex"}
"""Partition name suffix per pool: `a800-train`, `a800-flex`."""

ACCOUNTING_DB = "slurm_acct_db"
"""MariaDB database slurmdbd keeps accounting in (the slurmdbd.conf(5) StorageLoc default)."""


class ConfigFile:
    """A Slurm config file as ordered `Key=Value` records; one record per line (slurm.conf(5) syntax)."""

    def __init__(self, title: str) -> None:
        self._lines = [f"# {title}", "# Generated from the site spec by gpu-cluster: edit Pulumi.<stack>.yaml."]

    def section(self, title: str) -> "ConfigFile":
        self._lines += ["", f"# {title}"]
        return self

    def record(self, **pairs: str | int | None) -> "ConfigFile":
        """One line of `Key=Value` pairs in the order given; None leaves a key out."""
        self._lines.append(" ".join(f"{key}={value}" for key, value in pairs.items() if value is not None))
        return self

    def render(self) -> str:
        return "\n".join(self._lines) + "\n"


def slurm_groups(site: Site) -> list[NodeGroup]:
    return [g for g in site.node_groups if g.pool in SLURM_POOLS]


def slurm_nodes(site: Site) -> list[Node]:
    return [n for g in slurm_groups(site) for n in g.nodes]


def real_memory_mib(site: Site, group: NodeGroup) -> int:
    """RealMemory: installed memory less the OS reserve, in MiB (slurm.conf(5): 'in megabytes')."""
    return math.floor(group.memory_gib * 1024 * (1 - site.slurm.os_memory_reserve_pct / 100))


def hosts_shared(site: Site) -> bool:
    """Several Slurm nodes on one ssh_host: Slurm's multiple-slurmd mode, each `slurmd -N <node>` on its own port
    (components.site.rules.check_slurmd_ports) and with its own spool, PID and log file."""
    hosts = [n.ssh_host for n in slurm_nodes(site)]
    return len(set(hosts)) < len(hosts)


def partitions(site: Site) -> dict[str, list[NodeGroup]]:
    """Partition name -> its node groups: one partition per GPU type and pool, in spec order."""
    found: dict[str, list[NodeGroup]] = {}
    for group in slurm_groups(site):
        name = f"{gres_type(group.gpu_model)}-{PARTITION_ROLE[group.pool]}"
        found.setdefault(name, []).append(group)
    return found


def admitted_qos(site: Site, pool: Pool) -> list[str] | None:
    """The Slurm QoS a partition of the pool admits (slurm.conf(5) AllowQos), None for every QoS: the flex pool admits
    slurm.flex_qos alone, work a lend may requeue (check_flex_qos), so inference always wins a flex node at a peak.
    gpuctl simulate places jobs on flex nodes by the same answer."""
    return list(site.slurm.flex_qos) if pool == Pool.FLEX else None


def check_flex_qos(site: Site) -> list[Problem]:
    """With flex nodes, the flex partitions admit only QoS a lend may requeue: those the inference class preempts in
    the one table (runbooks/flex/lending.py requeues them and leaves any other job to finish, holding the node)."""
    if not any(g.pool == Pool.FLEX for g in site.node_groups):
        return []
    requeueable = inference_preempts(site)
    known = ", ".join(sorted(requeueable)) or "none"
    if not site.slurm.flex_qos:
        return [Problem("slurm.flex_qos", "empty, but the flex partitions need a QoS to admit: name one a lend may "
                        f"requeue (those the inference class preempts: {known})")]
    return [Problem(f"slurm.flex_qos[{i}]", f"{name} is not a QoS a lend may requeue (those the inference class "
                    f"preempts in scheduling.classes: {known}): its jobs on a flex node would hold it against "
                    "inference at a peak")
            for i, name in enumerate(site.slurm.flex_qos) if name not in requeueable]


def render_slurm_conf(site: Site) -> str:
    slurm = site.slurm
    conf = ConfigFile("slurm.conf, see slurm.conf(5)")
    conf.record(ClusterName=site.site_name)
    conf.record(SlurmctldHost=slurm.controller_host)
    conf.record(SlurmctldPort=slurm.slurmctld_port)
    conf.record(SlurmdPort=slurm.slurmd_port)
    conf.record(SlurmUser=slurm.slurm_user)
    conf.record(AuthType="auth/munge")
    # slurm.conf(5) AuthInfo: socket= is the MUNGE socket the daemons and clients talk to.
    conf.record(AuthInfo=f"socket={slurm.munge_socket}")
    # slurm.conf(5) SlurmctldParameters=enable_configless: slurmd started with --conf-server fetches
    # slurm.conf, gres.conf and cgroup.conf from slurmctld, so only the controller holds the files.
    conf.record(SlurmctldParameters="enable_configless")
    for key, value in _paths(site):
        conf.record(**{key: value})

    conf.section("Resources: GPUs, cores and memory are all consumable")
    conf.record(SelectType="select/cons_tres")
    # CR_Core_Memory: memory is consumable, so RealMemory and DefMemPerGPU bound what a job gets
    # (slurm.conf(5) RealMemory: lowering it for the OS only works with a *_Memory parameter).
    conf.record(SelectTypeParameters="CR_Core_Memory")
    conf.record(GresTypes="gpu")
    # slurm.conf(5) DefMemPerGPU: megabytes per allocated GPU; mutually exclusive with DefMemPerCPU.
    conf.record(DefMemPerGPU=slurm.def_mem_per_gpu_gib * 1024)
    conf.record(ProctrackType="proctrack/cgroup")
    conf.record(TaskPlugin="task/cgroup,task/affinity")
    conf.record(JobAcctGatherType="jobacct_gather/cgroup")
    if slurm.config_overrides:
        # slurm.conf(5) SlurmdParameters=config_overrides: every (emulated) node claims the CPUs, memory and GRES
        # written here instead of what its host really has.
        conf.record(SlurmdParameters="config_overrides")

    # spank(8): Pyxis runs job steps in enroot containers that get the GPU Operator's driver (docs/gpu-driver.md).
    # Named on local disk, where each host's plugins are installed: a configless node would look beside its fetched
    # slurm.conf instead. On a test host without Pyxis the file is Debian's own (an include of an empty folder), or
    # none, and Slurm loads no plugin.
    conf.record(PlugStackConfig=PLUGSTACK)

    conf.section("Job scripts: the GPU-to-job mapping for DCGM and the checkpoint mover")
    conf.record(Prolog=prolog_path(site))
    conf.record(Epilog=epilog_path(site))
    # slurm.conf(5) PrologFlags=Alloc: the prolog runs on every node at allocation, not only where a step
    # starts later, so all of a multi-node batch job's GPUs carry its label from the start.
    conf.record(PrologFlags="Alloc")

    conf.section("Scheduling: QoS preemption with requeue, multifactor priority with fairshare")
    conf.record(SchedulerType="sched/backfill")
    conf.record(PriorityType="priority/multifactor")
    conf.record(PriorityWeightQOS=slurm.priority_weight_qos)
    conf.record(PriorityWeightFairshare=slurm.priority_weight_fairshare)
    # slurm.conf(5) PriorityCalcPeriod: minutes between usage decay recalculations (default 5);
    # 1 lets fairshare react within a minute of a team's burst.
    conf.record(PriorityCalcPeriod=1)
    # slurm.conf(5) PreemptType=preempt/qos: the QoS table's Preempt lists decide who preempts whom;
    # REQUEUE puts a preempted batch job back in the queue instead of killing it, and
    # JobRequeue=1 makes batch jobs requeueable unless the user opts out.
    conf.record(PreemptType="preempt/qos")
    conf.record(PreemptMode="REQUEUE")
    conf.record(JobRequeue=1)
    # slurm.conf(5) KillWait: seconds from SIGTERM to SIGKILL for a job that is requeued, preempted or out of time;
    # chosen from the checkpoint interval (KILL_WAIT_S says why), so a lend never waits Slurm's default 30 s.
    conf.record(KillWait=KILL_WAIT_S)
    # slurm.conf(5) SlurmdTimeout: a slurmd silent this long is DOWN and its jobs are requeued (JobRequeue above).
    conf.record(SlurmdTimeout=slurm.slurmd_timeout_s)

    conf.section("Accounting: slurmdbd enforces associations, limits and QoS")
    conf.record(AccountingStorageType="accounting_storage/slurmdbd")
    conf.record(AccountingStorageHost=slurm.controller_host)
    conf.record(AccountingStoragePort=slurm.slurmdbd_port)
    # slurm.conf(5) AccountingStoragePass: with slurmdbd and MUNGE, the socket of the MUNGE daemon
    # that authenticates to slurmdbd (AuthInfo alone does not reach that connection).
    conf.record(AccountingStoragePass=slurm.munge_socket)
    # GPUs are a tracked TRES so fairshare and limits count GPU-time, not only CPU-time.
    conf.record(AccountingStorageTRES="gres/gpu")
    # Without qos enforcement an unknown --qos is accepted silently (slurm.conf(5) AccountingStorageEnforce).
    conf.record(AccountingStorageEnforce="associations,limits,qos")
    # slurm.conf(5) EnforcePartLimits, whose limits include a partition's AllowQOS: ANY refuses at submission a job
    # that no partition it names admits (sbatch -p a800-flex --qos=train_normal: "Invalid qos specification"), and
    # runs one naming several partitions in one that admits it.
    conf.record(EnforcePartLimits="ANY")

    conf.section("Nodes (slurm and flex pools)")
    for group in slurm_groups(site):
        gres = f"gpu:{gres_type(group.gpu_model)}:{group.gpus_per_node}"
        for node in group.nodes:
            conf.record(NodeName=node.name, NodeAddr=node.ssh_host, Port=node.slurmd_port, CPUs=group.cpus,
                        RealMemory=real_memory_mib(site, group), Gres=gres, State="UNKNOWN")

    conf.section("Partitions: one per GPU type and pool; the flex pool admits only work a lend may requeue")
    for index, (name, groups) in enumerate(partitions(site).items()):
        nodes = ",".join(n.name for g in groups for n in g.nodes)
        admitted = admitted_qos(site, groups[0].pool)
        conf.record(PartitionName=name, Nodes=nodes, Default="YES" if index == 0 else "NO",
                    MaxTime="INFINITE", State="UP", AllowQos=None if admitted is None else ",".join(admitted))
    return conf.render()


def _paths(site: Site) -> Iterator[tuple[str, str]]:
    slurm = site.slurm
    # slurm.conf(5): %n in SlurmdSpoolDir, SlurmdPidFile and SlurmdLogFile is the node name, so every
    # `slurmd -N <node>` on one host gets its own.
    node = "-%n" if hosts_shared(site) else ""
    yield "StateSaveLocation", slurm.state_save_dir
    yield "SlurmdSpoolDir", slurm.slurmd_spool_dir + ("/%n" if node else "")
    yield "SlurmctldPidFile", f"{slurm.run_dir}/slurmctld.pid"
    yield "SlurmdPidFile", f"{slurm.run_dir}/slurmd{node}.pid"
    yield "SlurmctldLogFile", f"{slurm.log_dir}/slurmctld.log"
    yield "SlurmdLogFile", f"{slurm.log_dir}/slurmd{node}.log"


def render_gres_conf(site: Site) -> str:
    """One line per node group. Every GPU is bound to its device file: lines without File= are dropped
    by slurmd and the node goes INVAL (gres.conf(5) File; AutoDetect=off so NVML is not needed)."""
    conf = ConfigFile("gres.conf, see gres.conf(5)")
    conf.record(AutoDetect="off")
    devices = site.slurm.gpu_device_prefix
    for group in slurm_groups(site):
        conf.record(NodeName=",".join(n.name for n in group.nodes), Name="gpu", Type=gres_type(group.gpu_model),
                    File=f"{devices}[0-{group.gpus_per_node - 1}]")
    return conf.render()


def render_cgroup_conf() -> str:
    """cgroup.conf(5): jobs see only their cores, memory and GPUs (devices) and cannot exceed them.
    The same for every site and for the loopback cluster, whose jobs are really confined too."""
    conf = ConfigFile("cgroup.conf, see cgroup.conf(5)")
    # autodetect: cgroup/v2 on Debian 12 nodes, cgroup/v1 on hosts still booted with the legacy hierarchy.
    conf.record(CgroupPlugin="autodetect")
    conf.record(ConstrainCores="yes")
    conf.record(ConstrainRAMSpace="yes")
    conf.record(ConstrainDevices="yes")
    return conf.render()


def render_slurmdbd_conf(site: Site) -> str:
    """slurmdbd.conf(5): one Key=Value per line (unlike slurm.conf, it rejects several on one line).

    slurmdbd logs in to MariaDB as slurm.slurm_user over the local unix socket (a MariaDB user IDENTIFIED VIA
    unix_socket), so the file holds no password.
    """
    slurm = site.slurm
    conf = ConfigFile("slurmdbd.conf, see slurmdbd.conf(5); the file must be mode 0600")
    conf.record(AuthType="auth/munge")
    conf.record(AuthInfo=f"socket={slurm.munge_socket}")
    conf.record(DbdHost=slurm.controller_host)
    conf.record(DbdPort=slurm.slurmdbd_port)
    conf.record(SlurmUser=slurm.slurm_user)
    conf.record(PidFile=f"{slurm.run_dir}/slurmdbd.pid")
    conf.record(LogFile=f"{slurm.log_dir}/slurmdbd.log")
    conf.record(StorageType="accounting_storage/mysql")
    # localhost: the client library's unix socket, not TCP (slurmdbd.conf(5) StorageHost).
    conf.record(StorageHost="localhost")
    conf.record(StorageUser=slurm.slurm_user)
    conf.record(StorageLoc=ACCOUNTING_DB)
    return conf.render()


ALREADY_PRESENT = ("Nothing new added.", "already exists")
"""What sacctmgr 22.05 prints, with exit status 1, when `add` finds everything there already."""


def render_accounting_commands(site: Site) -> list[list[str]]:
    """sacctmgr commands that make the database match the spec; running them again changes nothing.

    `add` only creates (of something that exists it changes nothing, but exits 1: see
    `accounting_script`); every setting is then written with `modify ... set`, so a changed
    spec converges on the next run. Not converged: an account or QoS dropped from the spec is left in
    place, and a preempt list emptied in the spec must be cleared by hand (see below).
    """
    sacctmgr = ["sacctmgr", "--immediate"]
    cluster = site.site_name
    table, preempted = slurm_qos(site), set(preempted_qos(site))
    # Lists in one call where sacctmgr takes them: each call costs ~0.4 s of slurmdbd round trips.
    commands = [[*sacctmgr, "add", "cluster", cluster], [*sacctmgr, "add", "qos", ",".join(q.name for q in table)]]
    # Lowest first: a QoS's preempt list may name only QoS whose own settings are already written.
    for qos in reversed(table):
        # A list replaces the old one. An empty list is left alone: in 22.05 `preempt=` (the documented
        # clear) leaves the QoS looking like it preempts everything to the loop check, so every later
        # `preempt=` naming it fails with "QOS Preemption loop detected".
        preempt = [f"preempt={','.join(qos.preempts)}"] if qos.preempts else []
        # sacctmgr(1) GraceTime, in seconds: what a job of this QoS gets between being picked for preemption and
        # its requeue (PREEMPTED_GRACE_S says why none).
        grace = [f"gracetime={PREEMPTED_GRACE_S}"] if qos.name in preempted else []
        commands.append([*sacctmgr, "modify", "qos", "where", f"name={qos.name}", "set",
                         f"priority={qos.priority}", *preempt, *grace])
    onboarded = site.teams_onboarded()
    # The platform account exists at every stage, the first (no team) included: the operators' own jobs (the
    # acceptance campaign's) run under it with the teams' QoS, so they load Slurm as a team's would.
    accounts = ",".join([PLATFORM_ACCOUNT, *(t.name for t in onboarded)])
    commands.append([*sacctmgr, "add", "account", accounts, f"cluster={cluster}", f"organization={site.site_name}"])
    commands.append([*sacctmgr, "modify", "account", "where", f"name={accounts}", f"cluster={cluster}",
                     "set", f"qos={','.join(team_qos(site))}", f"defaultqos={site.scheduling.team_default_class}"])
    # Fairshare per account, one call per distinct share value.
    by_share: dict[int, list[str]] = {}
    for team in onboarded:
        by_share.setdefault(team.fairshare, []).append(team.name)
    for share, names in by_share.items():
        commands.append([*sacctmgr, "modify", "account", "where", f"name={','.join(names)}", f"cluster={cluster}",
                         "set", f"fairshare={share}"])
    # The operators (root's account) may use every QoS, including those closed to teams (critical).
    commands.append([*sacctmgr, "modify", "account", "where", "name=root", f"cluster={cluster}",
                     "set", f"qos={','.join(q.name for q in table)}"])
    return commands


def accounting_script(site: Site) -> str:
    """The accounting commands as the one shell script the controller runs on every deploy: an `add` that
    finds its object there already (sacctmgr exits 1 and says so) counts as done; any other failure stops it."""
    already = " ".join(f"-e {shlex.quote(marker)}" for marker in ALREADY_PRESENT)
    steps = [f"out=$({shlex.join(argv)} 2>&1) || printf '%s' \"$out\" | grep -qF {already} "
             f"|| {{ printf '%s\\n' \"$out\" >&2; exit 1; }}" for argv in render_accounting_commands(site)]
    return "set -u; " + "; ".join(steps)
