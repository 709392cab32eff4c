"""cgroup confinement on real Slurm 22.05 (tests/harness/slurm_cluster.py, cgroup.conf from render_cgroup_conf): a job
that asks for 2 GPUs can open exactly the 2 device files it got.

The harness's GPUs are char devices 195:N made with mknod, with no driver behind them, so the kernel answers an open in
two ways: the cgroup device controller refuses a device the job was not given (EPERM) before any driver is asked; a
device the job was given reaches the driver lookup, which finds none (ENXIO or ENODEV). Slurm 22.05 confines devices
with the cgroup only (no per-job /dev), so the job still lists all 8 files: what it was given is what it can open."""

import errno
import json
from pathlib import Path

from tests.harness.figures import FIGURES
from tests.harness.slurm_cluster import Cluster, slurm_marks

pytestmark = slurm_marks()

PROBE = """#!/usr/bin/python3
import errno, json, os, sys
dev = sys.argv[1]
outcome = {}
for name in sorted(n for n in os.listdir(dev) if n.startswith("nvidia") and n[6:].isdigit()):
    try:
        os.close(os.open(os.path.join(dev, name), os.O_RDWR))
        outcome[name] = "opened"
    except OSError as err:
        outcome[name] = errno.errorcode[err.errno]
print(json.dumps({"outcome": outcome, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                  "job_gpus": os.environ.get("SLURM_JOB_GPUS", "")}))
"""
NO_DRIVER = {errno.errorcode[errno.ENXIO], errno.errorcode[errno.ENODEV]}


def test_should_let_a_two_gpu_job_open_only_its_two_devices(slurm: Cluster, tmp_path: Path) -> None:
    probe = slurm.stack.root / "probe-devices.py"
    probe.write_text(PROBE)
    probe.chmod(0o755)
    job = slurm.sbatch("-A", "speech", "--qos=train_normal", "-p", "a800-train", "-N", "1", "--gres=gpu:a800:2",
                       "--cpus-per-gpu=1", str(probe), str(slurm.stack.dev_dir))
    done = slurm.wait_state(job, "COMPLETED", timeout_s=30)
    assert done["ExitCode"] == "0:0", done
    seen = json.loads((slurm.stack.log_dir / f"job-{job}.out").read_text().strip().splitlines()[-1])
    outcome: dict[str, str] = seen["outcome"]
    given = {f"nvidia{index}" for index in seen["job_gpus"].split(",")}
    FIGURES.append(f"2-GPU job {job} got {sorted(given)}; open() of each device: {outcome}")
    assert len(outcome) == 8, outcome  # the listing is not confined
    assert len(given) == 2 and len(seen["cuda_visible_devices"].split(",")) == 2, seen
    assert {outcome[name] for name in given} <= NO_DRIVER, outcome
    assert {outcome[name] for name in outcome.keys() - given} == {errno.errorcode[errno.EPERM]}, outcome
