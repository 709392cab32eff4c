"""Slurm jobs with --container-image on a loopback cluster, run inside the container test's root
(tests/integration/test_slurm_containers.py), where the stack's deploy step installed enroot and Pyxis and wrote the
plugin's line at the paths production uses.

`python -m tests.harness.container_jobs IMAGE ROOT` brings the cluster up under ROOT (tests/harness/slurm_cluster.py:
the loopback test stack of prod with its Slurm nodes renamed, so its cgroups never meet the session cluster's, planned
by `gpuctl plan`), runs the jobs and prints one JSON object of what each printed; every daemon is stopped before it
exits, whatever happened.
"""

import json
import sys
import time
from pathlib import Path
from typing import Any

from components.site.site import Pool
from components.site.wellknown import PLATFORM_ACCOUNT
from tests.builders import prod_values
from tests.harness.slurm_cluster import Cluster, bring_up, loopback_cluster

NODE_PREFIX = "ctr-"
"""Slurm names its cgroups after the node (cgroup v1, several slurmd on one host): these never meet the session's."""
JOB_TIMEOUT_S = 90
"""s a containerised job may take: enroot unpacks the image on each node first."""
IN_IMAGE = "cat /etc/inside; echo node=$SLURMD_NODENAME"
"""What each job step runs: /etc/inside exists only in the test's image, so its line proves the step ran in it."""


NODE_LOCAL = ("/run/enroot", "/var/lib/enroot", "/var/cache/enroot", "/run/pyxis")
"""Where enroot and Pyxis keep a node's containers (the plan's enroot.conf drop-in and Pyxis line): on local disk, so
two emulated nodes on one machine must not share them (both would unpack job 1's step as pyxis_1_1.0)."""


class NodesOnOwnDisks(Cluster):
    """Each slurmd in a mount namespace of its own whose NODE_LOCAL folders are empty, as on separate machines."""

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        if name.startswith("slurmd-"):
            local = " && ".join(f"mkdir -p {path} && mount -t tmpfs -o mode=1777 tmpfs {path}" for path in NODE_LOCAL)
            # unshare execs, and so does sh: the daemon keeps the PID the cluster stops it by.
            args = ("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", f'{local} && exec "$@"',
                    "slurmd", *args)
        super().start(name, *args, env=env)


def renamed() -> dict[str, Any]:
    values = prod_values()
    for group in values["node_groups"]:
        if group["pool"] in (Pool.SLURM, Pool.FLEX):
            for node in group["nodes"]:
                node["name"] = NODE_PREFIX + node["name"]
    return values


def run_jobs(cluster: Cluster, image: str) -> dict[str, Any]:
    # The operators' account, which exists at every stage (prod's first onboards no team), with the teams' QoS.
    account = ["-A", PLATFORM_ACCOUNT, "--qos=train_normal"]
    partition = ["-p", "a800-train"]
    started = time.monotonic()
    srun = cluster.run("srun", *account, *partition, "-N2", f"--container-image={image}", "sh", "-c", IN_IMAGE,
                       check=False, timeout_s=JOB_TIMEOUT_S)
    seconds = {"srun": time.monotonic() - started}
    batch = cluster.sbatch(*account, *partition, "-N2", f"--container-image={image}", "--wrap", IN_IMAGE)
    plain = cluster.sbatch(*account, *partition, "--wrap", "test ! -e /etc/inside && echo on the host")
    outcome: dict[str, Any] = {"srun": {"rc": srun.returncode, "stdout": srun.stdout, "stderr": srun.stderr}}
    for name, job in (("sbatch", batch), ("plain", plain)):
        try:
            state = cluster.wait_state(job, "COMPLETED", timeout_s=JOB_TIMEOUT_S)
        except AssertionError as error:
            state = {"error": str(error)}
        seconds[name] = time.monotonic() - started
        out = cluster.stack.log_dir / f"job-{job}.out"
        outcome[name] = {"state": state, "stdout": out.read_text() if out.exists() else ""}
    return outcome | {"seconds": seconds}


def main(image: str, root: Path) -> None:
    root.mkdir(parents=True)
    cluster = loopback_cluster(root, renamed(), NodesOnOwnDisks)
    started = time.monotonic()
    try:
        bring_up(cluster)
        up = time.monotonic() - started
        outcome = run_jobs(cluster, image)
        outcome["seconds"]["cluster up"] = up
    finally:
        cluster.stop()
    print(json.dumps(outcome))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
