"""Power loss of one emulated node of the loopback Slurm cluster (tests/harness/slurm_cluster.py), as a drill's
inject command: the node's slurmd and every process of its jobs killed with SIGKILL, nothing told, as a node whose
power is cut. Standard library only; it runs as root, as the cluster does.

    loopback_power.py NODE SLURMD_PID_FILE [CGROUP_ROOT]

A job's processes are found by the cgroups slurmd made for the node: `<controller>/slurm_<NODE>/` under cgroup v1,
`<NODE>_slurmstepd.scope/` under cgroup v2 (slurmd names them after `-N NODE`, so each emulated node has its own).
Only the v1 layout has run here: this machine's kernel mounts cgroup v1.
"""

import contextlib
import os
import signal
import sys
from pathlib import Path


def job_pids(node: str, cgroup_root: Path) -> set[int]:
    trees = [*cgroup_root.glob(f"*/slurm_{node}"), *cgroup_root.glob(f"**/{node}_slurmstepd.scope")]
    return {int(pid) for tree in trees for procs in tree.rglob("cgroup.procs") for pid in procs.read_text().split()}


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # gone already
        os.kill(pid, signal.SIGKILL)


def main(node: str, pid_file: str, cgroup_root: str = "/sys/fs/cgroup") -> int:
    kill(int(Path(pid_file).read_text().split()[0]))
    for pid in sorted(job_pids(node, Path(cgroup_root))):
        kill(pid)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
