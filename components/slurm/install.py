"""What the Slurm component installs on the controller and the nodes over SSH: files, units and the commands that put
them in place. Pure: no pulumi."""

import base64
import hashlib
import re
import shlex
from typing import Any

from components.facility.admission import Verdict
from components.scheduling.preemption import slurm_qos
from components.site.site import Site
from components.site.wellknown import COLD_FILESYSTEM
from components.slurm.conf import (
    ACCOUNTING_DB,
    partitions,
    render_cgroup_conf,
    render_gres_conf,
    render_slurm_conf,
    render_slurmdbd_conf,
)
from components.slurm.containers import ENROOT_TMPFILES, containers_step, node_container_files, submit_files
from components.slurm.scripts import (
    EXPORTER_UNIT,
    epilog_path,
    exporter_path,
    mover_path,
    prolog_path,
    render_epilog,
    render_exporter_unit,
    render_prolog,
    render_tier_mounts,
)
from components.storage.tiers import NFS_MOUNT_OPTIONS
from hosts import SLURM_EXPORTER

CONFIG_DIR = "/etc/slurm"


SLURMD_DEFAULTS = "/etc/default/slurmd"


SYSTEMD_UNIT_DIR = "/etc/systemd/system"


ENABLE_CONTROLLER_DAEMONS = f"systemctl daemon-reload && systemctl enable slurmdbd slurmctld {EXPORTER_UNIT}"


def install_script(files: dict[str, tuple[str, int]], then: str) -> str:
    """A shell script that writes each file (path: content, mode), then runs `then`. Content travels
    base64-encoded so no quoting can change it; each file is replaced atomically. Paths are quoted: systemd
    unit names hold backslashes."""
    directories = sorted({path.rsplit("/", 1)[0] for path in files})
    steps = [f"install -d -m 0755 {shlex.quote(directory)}" for directory in directories]
    for path, (content, mode) in files.items():
        encoded = base64.b64encode(content.encode()).decode()
        new, final = shlex.quote(f"{path}.new"), shlex.quote(path)
        steps.append(f"echo {encoded} | base64 -d > {new} && chmod {mode:o} {new} && mv {new} {final}")
    steps.append(then)
    return " && ".join(steps)


_WORD = r"('[^']*'|[^\s']+)"
INSTALL_STEP = re.compile(rf"echo ([A-Za-z0-9+/=]*) \| base64 -d > {_WORD} && chmod [0-7]+ {_WORD} "
                          rf"&& mv {_WORD} {_WORD}")


def installed_files(script: str) -> tuple[dict[str, str], str]:
    """What an `install_script` writes (path: content) and what it runs then: its inverse, for what reads a plan."""
    steps = list(INSTALL_STEP.finditer(script))
    files = {shlex.split(step.group(5))[0]: base64.b64decode(step.group(1)).decode() for step in steps}
    return files, script[steps[-1].end():].removeprefix(" && ") if steps else script


def controller_files(site: Site) -> dict[str, tuple[str, int]]:
    """The daemons' configuration and the Slurm exporter with its service unit. The lending controller comes with its
    code, in a release of its own (components.slurm.release)."""
    files = {"slurm.conf": (render_slurm_conf(site), 0o644), "gres.conf": (render_gres_conf(site), 0o644),
             "cgroup.conf": (render_cgroup_conf(), 0o644), "slurmdbd.conf": (render_slurmdbd_conf(site), 0o600)}
    return {**{f"{CONFIG_DIR}/{name}": content for name, content in files.items()},
            **submit_files(),
            APT_SOURCE: (f"{site.slurm.package_source}\n", 0o644),
            exporter_path(site): (SLURM_EXPORTER.read_text(), 0o644),
            f"{SYSTEMD_UNIT_DIR}/{EXPORTER_UNIT}": (render_exporter_unit(site), 0o644)}


def node_files(site: Site) -> dict[str, tuple[str, int]]:
    """What every Slurm node holds, the same on each: Debian's slurmd.service reads SLURMD_OPTIONS from
    /etc/default/slurmd; the job scripts (the mover they start comes as a file of its own: mover_path); the apt source
    of Slurm; the tier mount units; what containerised steps need to get the GPU Operator's driver
    (components.slurm.containers)."""
    server = f"{site.slurm.controller_host}:{site.slurm.slurmctld_port}"
    files = {SLURMD_DEFAULTS: (f'SLURMD_OPTIONS="--conf-server {server}"\n', 0o644),
             prolog_path(site): (render_prolog(site.gpu_operator.hpc_job_mapping_dir), 0o755),
             epilog_path(site): (render_epilog(site, site.gpu_operator.hpc_job_mapping_dir), 0o755),
             APT_SOURCE: (f"{site.slurm.package_source}\n", 0o644),
             **node_container_files()}
    for unit, content in tier_mounts(site).items():
        files[f"{SYSTEMD_UNIT_DIR}/{unit}"] = (content, 0o644)
    return files


def tier_mounts(site: Site) -> dict[str, str]:
    return render_tier_mounts(site, NFS_MOUNT_OPTIONS, COLD_FILESYSTEM)


def start_node_services(site: Site) -> str:
    """Mounts the tiers (enabling a mounted unit again is a no-op), makes enroot's directories, then (re)starts
    slurmd."""
    units = " ".join(shlex.quote(unit) for unit in tier_mounts(site))
    return (f"systemctl daemon-reload && systemctl enable --now {units} "
            f"&& systemd-tmpfiles --create {ENROOT_TMPFILES} && systemctl enable slurmd && systemctl restart slurmd")


def node_admission(site: Site, node: str, verdict: Verdict) -> str:
    """Waits until slurmctld hears from the node's slurmd, then drains the node with the node check's reason or
    resumes it. The node's slurmd fetched the configuration (configless): the clients read slurmd's cache of it,
    <SlurmdSpoolDir>/conf-cache (Debian's slurmd 22.05.8 names it so: `strings /usr/sbin/slurmd`)."""
    conf = shlex.quote(f"{site.slurm.slurmd_spool_dir}/conf-cache/slurm.conf")
    state = f"SLURM_CONF={conf} timeout {CLIENT_TIMEOUT_S} sinfo --noheader --nodes={node} --format=%T"
    # sinfo marks a node slurmctld does not hear from with `*`; unknown and down are no answer either.
    registered = f'case "$({state})" in ""|*"*"|unknown*|down*) false ;; esac'
    return f"{answers(f'slurmd on {node} (sinfo)', registered)} && SLURM_CONF={conf} {admission_command(node, verdict)}"


def node_command(site: Site, node: str, verdict: Verdict) -> str:
    """What a node runs once its files are in place: Slurm from the spec's source, SlurmUser (slurmd and the clients
    read it), the MUNGE key (on stdin), the mover put in place from its copy, enroot and Pyxis from the mirror, its
    services, then its admission."""
    return " && ".join([package_step(site, NODE_PACKAGES), slurm_user_step(site), MUNGE_KEY_STEP,
                        f'install -D -m 0644 "$HOME/{MOVER_COPY}" {shlex.quote(mover_path(site))}',
                        containers_step(site),
                        start_node_services(site), node_admission(site, node, verdict)])


MOVER_COPY = "gpucluster-checkpoint_tiering.py"
"""Where the mover's copy lands on a node: in ssh_user's home, which SFTP starts in and only that user writes.
CopyToRemote makes no missing parent directory (pulumi-command's remotePath), so the node's command installs it at
mover_path."""
APT_SOURCE = "/etc/apt/sources.list.d/gpucluster-slurm.list"
MUNGE_KEY = "/etc/munge/munge.key"
MUNGE_KEY_BYTES = (32, 1024)
"""The sizes mungekey(8) makes (--bits 256-8192); the secret munge_key is a key of this size, base64-encoded."""
CONTROLLER_PACKAGES = (("slurmctld", "slurmdbd", "slurm-client"), ("munge", "mariadb-server", "curl"))
NODE_PACKAGES = (("slurmd", "slurm-client"), ("munge", "curl"))
"""(Slurm's packages, installed at slurm.package_version; what they need, at the source's version: curl downloads
enroot and Pyxis from slurm.containers.mirror_url)."""
ANSWER_TRIES = 30
"""Seconds a deploy waits for a daemon it (re)started to answer: Debian's slurmctld and slurmdbd units are
Type=simple, so `systemctl restart` returns before they listen."""
CLIENT_TIMEOUT_S = 10
"""Bound on each Slurm client call: with the daemon down, each retries for about 10 s."""


def package_step(site: Site, packages: tuple[tuple[str, ...], tuple[str, ...]]) -> str:
    """Installs Slurm at slurm.package_version from the apt source (APT_SOURCE, written by the install script) unless
    every package is installed already with that version, so a redeploy needs no archive; then fails, saying what is
    installed, unless they are."""
    slurm, support = packages
    version = site.slurm.package_version
    slurm_state = shlex.quote("${db:Status-Abbrev}${Version}\n")
    support_state = shlex.quote("${db:Status-Abbrev}\n")
    found = shlex.quote("${Package} ${db:Status-Abbrev}${Version}\n")
    installed = (f'{{ test "$(dpkg-query -W -f={slurm_state} {" ".join(slurm)} 2>/dev/null | sort -u)" = '
                 f'{shlex.quote("ii " + version)} && test "$(dpkg-query -W -f={support_state} {" ".join(support)} '
                 f"2>/dev/null | sort -u)\" = 'ii '; }}")
    pinned = " ".join([*(f"{name}={version}" for name in slurm), *support])
    wrong = shlex.quote(f"slurm.package_version: {version} is not what is installed:")
    return (f"{{ {installed} || {{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
            f"--no-install-recommends --allow-downgrades -o Dpkg::Options::=--force-confold {pinned}; }} || true; }} "
            f"&& {{ {installed} || {{ echo {wrong} "
            f"$(dpkg-query -W -f={found} {' '.join([*slurm, *support])} 2>&1) >&2; "
            "exit 1; }; }")


MUNGE_KEY_STEP = (
    f"(umask 077 && base64 -d > {MUNGE_KEY}.new) && size=$(stat -c %s {MUNGE_KEY}.new) "
    f"&& {{ [ \"$size\" -ge {MUNGE_KEY_BYTES[0]} ] && [ \"$size\" -le {MUNGE_KEY_BYTES[1]} ] "
    f"|| {{ rm -f {MUNGE_KEY}.new; "
    f"echo \"munge_key: $size bytes; a MUNGE key has {MUNGE_KEY_BYTES[0]} to {MUNGE_KEY_BYTES[1]} (mungekey -c)\" >&2; "
    f"exit 1; }}; }} && chown munge:munge {MUNGE_KEY}.new && chmod 0400 {MUNGE_KEY}.new "
    f"&& mv {MUNGE_KEY}.new {MUNGE_KEY} "
    "&& systemctl enable munge && systemctl restart munge"
)
"""Puts the MUNGE key the command reads on stdin (the secret munge_key, base64) in place, readable by munged alone,
and restarts munged with it; a key of a size mungekey never makes stops the deploy. The key is never an argument or
a file of the install script."""


def answers(what: str, check: str, tries: int = ANSWER_TRIES) -> str:
    """Waits, a second at a time and at most `tries` times, until `check` succeeds; fails naming `what` when it never
    does."""
    return (f"{{ i=0; until {check} >/dev/null 2>&1; do i=$((i+1)); [ $i -lt {tries} ] || "
            f"{{ echo {shlex.quote(f'{what} does not answer ({tries} tries, 1 s apart)')} >&2; exit 1; }}; "
            "sleep 1; done; }")


def database_step(site: Site) -> str:
    """MariaDB's slurm_acct_db and the user slurmdbd logs in as over the local socket, slurm.slurm_user (unix_socket
    authentication: the OS user is the database user, so no password exists to leak); root runs it through Debian's
    own unix_socket login."""
    user = f"'{site.slurm.slurm_user}'@'localhost'"  # the spec's pattern leaves no quote in it
    sql = (f"CREATE DATABASE IF NOT EXISTS {ACCOUNTING_DB}; "
           f"CREATE USER IF NOT EXISTS {user} IDENTIFIED VIA unix_socket; "
           f"GRANT ALL ON {ACCOUNTING_DB}.* TO {user};")
    up = answers("MariaDB", f"mariadb -e {shlex.quote('SELECT 1')}")
    return (f"systemctl enable mariadb && systemctl start mariadb && {up} "
            f"&& mariadb -e {shlex.quote(sql)}")


def restart_daemons(site: Site) -> str:
    """slurmdbd first, and slurmctld only once slurmdbd answers: slurmctld exits at start when it cannot reach it
    ("slurmdbd and/or database must be up at slurmctld start time"). Then slurmctld must answer `scontrol ping` and
    have registered this cluster with slurmdbd (`sacctmgr show cluster`); only then does `scontrol reconfigure` push
    the configuration to the nodes."""
    dbd = f"timeout {CLIENT_TIMEOUT_S} sacctmgr --noheader show cluster"
    ping = f"timeout {CLIENT_TIMEOUT_S} scontrol ping | grep -q 'is UP'"
    cluster = (f"timeout {CLIENT_TIMEOUT_S} sacctmgr --noheader --parsable2 show cluster format=cluster "
               f"| grep -qx {shlex.quote(site.site_name)}")
    return " && ".join([ENABLE_CONTROLLER_DAEMONS, "systemctl restart slurmdbd", answers("slurmdbd (sacctmgr)", dbd),
                        f"systemctl restart slurmctld {EXPORTER_UNIT}", answers("slurmctld (scontrol ping)", ping),
                        answers(f"the cluster {site.site_name} in slurmdbd (sacctmgr show cluster)", cluster),
                        "scontrol reconfigure"])


def controller_command(site: Site) -> str:
    """What the controller runs once its files are in place: Slurm and MariaDB from the spec's source, SlurmUser and
    what it must own, the MUNGE key, enroot and Pyxis from the mirror (jobs submitted here take --container-image), the
    accounting database, then the daemons restarted and asked whether they answer."""
    return " && ".join([package_step(site, CONTROLLER_PACKAGES), slurm_user_step(site), owned_by_slurm(site),
                        MUNGE_KEY_STEP, containers_step(site), database_step(site), restart_daemons(site)])


def slurm_user_step(site: Site) -> str:
    """Makes slurm.slurm_user a system user (with its own group, no home, no login shell) unless it exists: Debian's
    packages make only `slurm`, and every Slurm program that reads slurm.conf stops at a SlurmUser the host does not
    know ("Invalid user for SlurmUser ..., ignored" then "Unable to process configuration file": read_config.c), so
    the nodes' slurmd and clients need it as much as the controller's daemons and chowns."""
    user = site.slurm.slurm_user  # the spec's pattern (a POSIX user name) leaves nothing to quote
    return (f"{{ id -u {user} >/dev/null 2>&1 "
            f"|| useradd --system --user-group --no-create-home --shell /usr/sbin/nologin {user}; }}")


def owned_by_slurm(site: Site) -> str:
    """What the daemons refuse unless SlurmUser owns it (the package made `slurm`): slurmdbd.conf ("slurmdbd.conf
    not owned by SlurmUser"), and slurmctld's StateSaveLocation, which it makes as SlurmUser."""
    state, user = shlex.quote(site.slurm.state_save_dir), site.slurm.slurm_user
    return f"chown {user}:{user} {CONFIG_DIR}/slurmdbd.conf && install -d -o {user} -g {user} -m 0755 {state}"


def admission_command(node: str, verdict: Verdict) -> str:
    if verdict.validated:
        return f"scontrol update nodename={node} state=resume || true"  # resume of a node not drained is a no-op
    reason = f"node check failed: {verdict.reason}"[:200]
    return f"scontrol update nodename={node} state=drain reason={shlex.quote(reason)}"


def slurm_facts(site: Site) -> dict[str, Any]:
    """What the policy pack judges (docs/policy.md): the QoS table and the partitions."""
    return {
        "qos": [{"name": q.name, "priority": q.priority, "preempt": list(q.preempts)} for q in slurm_qos(site)],
        "partitions": [{"name": name, "nodes": [n.name for g in groups for n in g.nodes]}
                       for name, groups in partitions(site).items()],
    }


def _digest(files: dict[str, tuple[str, int]]) -> str:
    return hashlib.sha256("".join(f"{n}:{m}:{c}" for n, (c, m) in sorted(files.items())).encode()).hexdigest()[:16]
