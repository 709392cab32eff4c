"""What Slurm runs on the nodes beside its daemons: the prolog and epilog, the checkpoint tiers' mount units, and the
systemd units of the Slurm exporter and the lending controller on the controller.

Pure: no pulumi, no I/O. Every path and name comes from the site spec (see components/slurm/conf.py, whose
slurm.conf points slurmd at the prolog and epilog).
"""

import shlex

from components.site.site import Site
from components.site.wellknown import MOVER_LOCK
from components.storage.tiers import mover_args, mover_stop_after_s
from hosts.checkpoint_mover import LOCK_HELD_EXIT

MOVER_START_TIMEOUT_S = 10
"""s the epilog waits for its detached mover to start; the node stays COMPLETING meanwhile."""
EXPORTER_UNIT = "gpucluster-slurm-exporter.service"
LENDING_UNIT = "gpucluster-flex-controller.service"
"""The lending controller (`gpuctl flex control`, runbooks/flex/controller.py) on the controller."""
CEPH_CLIENT = "slurm-nodes"
"""CephX user the nodes mount the cold tier as; its keyring is /etc/ceph/ceph.client.slurm-nodes.keyring."""
SCRIPT_SEARCH_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
"""slurmd runs Prolog and Epilog without a search path (Prolog and Epilog Guide, slurm.schedmd.com)."""


def prolog_path(site: Site) -> str:
    """On every node: 22.05 configless slurmd fetches slurm.conf, gres.conf and cgroup.conf, never the scripts
    (shipping them arrived in 23.02), so the node command installs them in slurm.scripts_dir."""
    return f"{site.slurm.scripts_dir}/prolog.sh"


def epilog_path(site: Site) -> str:
    return f"{site.slurm.scripts_dir}/epilog.sh"


def mover_path(site: Site) -> str:
    """The checkpoint mover (hosts/checkpoint_mover.py, stdlib only) on every node, for the epilog."""
    return f"{site.slurm.programs_dir}/checkpoint_tiering.py"


def exporter_path(site: Site) -> str:
    """The Slurm exporter (hosts/slurm_exporter.py, stdlib only) on the controller."""
    return f"{site.slurm.programs_dir}/slurm_exporter.py"


def render_prolog(mapping_dir: str) -> str:
    """Writes `<mapping_dir>/<GPU index>` holding the job id for each GPU the job got on this node; the DCGM
    exporter labels that GPU's metrics `hpc_job` from it (one job id per line)."""
    return f"""#!/bin/sh
# Slurm Prolog, see slurm.conf(5): slurmd runs it as root on each node of a job at allocation
# (PrologFlags=Alloc). SLURM_JOB_GPUS holds the node's GPU indices the job got (Prolog and Epilog only).
# It always exits 0: a failing prolog drains the node and holds the job, too much for a metrics label.
export PATH={SCRIPT_SEARCH_PATH}
mapping_dir={shlex.quote(mapping_dir)}
[ -n "${{SLURM_JOB_GPUS:-}}" ] || exit 0
mkdir -p "$mapping_dir" || exit 0
for gpu in $(echo "$SLURM_JOB_GPUS" | tr , ' '); do
    # Replaced atomically: the exporter may read the file at any moment.
    printf '%s\\n' "$SLURM_JOB_ID" > "$mapping_dir/.$gpu.new" && mv -f "$mapping_dir/.$gpu.new" "$mapping_dir/$gpu"
done
exit 0
"""


def render_epilog(site: Site, mapping_dir: str) -> str:
    """Removes the job's GPU mapping, then starts the checkpoint mover for the job's team (its account).

    The node stays COMPLETING until the epilog exits (slurm.conf(5) Epilog), so the epilog does only local file
    work and returns in milliseconds: everything that touches NFS or CephFS, which can hang, runs detached
    (`setsid -f`) under `timeout`: past the spec's mover deadline and its grace (mover_stop_after_s) it is stopped
    (SIGTERM, SIGKILL 60 s later). Stopping it is safe: a partial copy is removed by a later run and a finished one
    is verified and completed; the CronJob moves the rest. When the epilog exits, slurmd kills its whole process group
    (run_command_waitpid_timeout(): "kill children too"), so the epilog waits, at most MOVER_START_TIMEOUT_S, until
    the detached shell has said it runs: by then it is in a session and process group of its own. Without that
    wait, a loaded node killed the mover before `setsid -f`'s child had called setsid(). For each NFS server whose
    export root holds the team's
    share, the mover sweeps that root, as the CronJob does (the mover's --hot is a tier root, <team>/<run>/...),
    unless another node's epilog holds the server's lock. No --metrics-file: a node's file would go stale once
    the team stops using the node and fire the last-success alert; the CronJob's metrics stay the signal.
    """
    storage = site.storage
    mover, hot_root, cold_root = mover_path(site), storage.nfs_hot.mount_root, storage.ceph_cold.mount_path
    log_dir = site.slurm.log_dir
    move = f'python3 "$mover" --hot "$root" --cold "$cold_root" {shlex.join(mover_args(site))}'
    log = shlex.quote(f"{log_dir}/checkpoint-mover.log")
    return f"""#!/bin/sh
# Slurm Epilog, see slurm.conf(5): slurmd runs it as root on every node of the job when the job ends; the
# node takes no new job until it exits. SLURM_JOB_GPUS and SLURM_JOB_ACCOUNT: see "PROLOG AND EPILOG SCRIPTS".
export PATH={SCRIPT_SEARCH_PATH}
mapping_dir={shlex.quote(mapping_dir)}
for gpu in $(echo "${{SLURM_JOB_GPUS:-}}" | tr , ' '); do
    # Only this job's file: never one a later job's prolog has written.
    [ "$(cat "$mapping_dir/$gpu" 2>/dev/null)" = "$SLURM_JOB_ID" ] && rm -f "$mapping_dir/$gpu"
done

# Team accounts are DNS labels; anything else names no share (root's jobs, for one, have none).
team=${{SLURM_JOB_ACCOUNT:-}}
case $team in ''|.*|*/*) exit 0 ;; esac
started=$(mktemp) || exit 0
export team started mover={shlex.quote(mover)} hot_root={shlex.quote(hot_root)} cold_root={shlex.quote(cold_root)}
setsid -f timeout --kill-after=60 {mover_stop_after_s(site)} sh -c '
rm -f "$started"
for share in "$hot_root"/*/"$team"; do
    [ -d "$share" ] || continue
    root=${{share%/*}}
    echo "$(date -Is) job $SLURM_JOB_ID ($team) ended: moving checkpoints on $root"
    {move}
    [ $? -ne {LOCK_HELD_EXIT} ] || echo "$(date -Is) job $SLURM_JOB_ID: $root/{MOVER_LOCK} is held by another mover"
done' >>{log} 2>&1 </dev/null
# slurmd kills this script's process group when it exits: return only once the mover runs in its own.
tries=0
while [ -e "$started" ] && [ $tries -lt {MOVER_START_TIMEOUT_S * 10} ]; do sleep 0.1; tries=$((tries + 1)); done
if [ -e "$started" ]; then
    rm -f "$started"
    echo "$(date -Is) job $SLURM_JOB_ID ($team): the mover did not start within {MOVER_START_TIMEOUT_S} s" >>{log}
fi
exit 0
"""


def systemd_path_unit(path: str, kind: str) -> str:
    """The unit name systemd requires for a path (`systemd-escape --path --suffix=<kind>`, systemd.unit(5)):
    '/' between parts becomes '-', any other byte but [A-Za-z0-9:_.] and a leading '.' become \\xNN."""

    def escape(index: int, char: str) -> str:
        plain = char.isascii() and (char.isalnum() or char in ":_.") and not (index == 0 and char == ".")
        return char if plain else "".join(f"\\x{byte:02x}" for byte in char.encode())

    name = path.strip("/")
    return "".join("-" if c == "/" else escape(i, c) for i, c in enumerate(name)) + f".{kind}"


def render_tier_mounts(site: Site, nfs_options: list[str], cold_filesystem: str) -> dict[str, str]:
    """systemd.mount(5) units, by unit name, that mount each NFS server's export root at
    <nfs_hot.mount_root>/<server> and the CephFS `cold_filesystem` at ceph_cold.mount_path.

    `nfs_options` are those the teams' NFS StorageClasses give pods (components.storage.tiers). mount.ceph(8)
    reads the monitors from /etc/ceph/ceph.conf and the key from the CEPH_CLIENT keyring, so no address or
    secret is written here.
    Enabling a mounted unit again changes nothing; a changed unit applies at the next (re)mount.
    """
    nfs, cold = site.storage.nfs_hot, site.storage.ceph_cold
    mounts = [(f"{nfs.mount_root}/{server}", f"{server}:{nfs.export_root}", "nfs", ",".join(nfs_options),
               f"Checkpoint hot tier on {server}") for server in nfs.servers]
    mounts.append((cold.mount_path, ":/", "ceph", f"name={CEPH_CLIENT},fs={cold_filesystem},noatime",
                   f"Checkpoint cold tier (CephFS {cold_filesystem})"))
    units = {}
    for where, what, fs_type, options, description in mounts:
        units[systemd_path_unit(where, "mount")] = "\n".join([
            "# Generated from the site spec by gpu-cluster: edit Pulumi.<stack>.yaml.",
            "[Unit]", f"Description={description}",
            # _netdev and network-online: mount only once the network is up (systemd.mount(5)).
            "Wants=network-online.target", "After=network-online.target", "",
            "[Mount]", f"What={what}", f"Where={where}", f"Type={fs_type}", f"Options=_netdev,{options}", "",
            "[Install]", "WantedBy=remote-fs.target", "",
        ])
    return units


def render_lending_unit(site: Site, stack: str) -> str:
    """systemd.service(5) unit running the lending controller on the Slurm controller: gpuctl from the release the
    stack installed (components.slurm.release), reading the stack's spec there. It runs as root, as `scontrol update`
    and `scontrol requeue` need SlurmUser or root; kubectl authenticates with lending.kubeconfig."""
    lending = site.lending
    current = f"{lending.project_dir}/current"
    gpuctl = f"{current}/.venv/bin/gpuctl"
    return "\n".join([
        "# Generated from the site spec by gpu-cluster: edit Pulumi.<stack>.yaml.",
        "[Unit]", "Description=Lends flex nodes to Kubernetes inference at a peak and takes them back (gpu-cluster)",
        "Wants=network-online.target", "After=network-online.target slurmctld.service", "",
        "[Service]",
        f"Environment=KUBECONFIG={lending.kubeconfig}",
        f"ExecStart={gpuctl} flex --project-dir {current} --stack {stack} control "
        f"--port {lending.metrics_port}",
        # A crash mid-move is finished by the next start: lend and reclaim read the live state first.
        "Restart=always", "RestartSec=10", "",
        "[Install]", "WantedBy=multi-user.target", "",
    ])


def render_exporter_unit(site: Site) -> str:
    """systemd.service(5) unit running the Slurm exporter on the controller. It needs no privilege: sinfo and sacct
    authenticate any user through munge, so it runs as a throwaway user on a read-only system."""
    return "\n".join([
        "# Generated from the site spec by gpu-cluster: edit Pulumi.<stack>.yaml.",
        "[Unit]", "Description=Slurm scheduler metrics for Prometheus (gpu-cluster)",
        "Wants=network-online.target", "After=network-online.target slurmctld.service", "",
        "[Service]",
        f"ExecStart=/usr/bin/python3 {exporter_path(site)} --listen {site.slurm.exporter_address} "
        f"--port {site.slurm.exporter_port} --interval {site.slurm.exporter_interval_s}",
        "DynamicUser=yes", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
        "Restart=always", "RestartSec=10", "",
        "[Install]", "WantedBy=multi-user.target", "",
    ])
