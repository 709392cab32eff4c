"""The generated configuration judged by its real consumers, where they are installed on this machine.

`gpuctl plan` runs these after writing its files: promtool reads the rules, amtool the routing, and
Slurm's own client parses slurm.conf. A consumer that is not installed is reported as skipped, never
as passed.
"""

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from runbooks.children import exit_status

TIMEOUT_S = 60


@dataclass(frozen=True)
class Check:
    artifact: str
    """Path under the plan's output directory."""
    consumer: str
    argv: tuple[str, ...]
    """The consumer's command; `{path}` stands for the artifact's full path."""
    slurm_conf: bool = False
    """Whether the command reads the artifact through SLURM_CONF instead of an argument."""


@dataclass(frozen=True)
class Outcome:
    check: Check
    status: str
    """passed, failed or skipped."""
    detail: str


CHECKS = (
    Check("prometheus/rules.yaml", "promtool", ("promtool", "check", "rules", "{path}")),
    Check("alertmanager/alertmanager.yml", "amtool", ("amtool", "check-config", "{path}")),
    # Any Slurm client parses slurm.conf first and fails on an unknown key or a bad node line.
    Check("slurm/slurm.conf", "scontrol", ("scontrol", "show", "hostnames", "localhost"), slurm_conf=True),
)


def run_checks(out_dir: Path) -> list[Outcome]:
    return [_run(check, out_dir / check.artifact) for check in CHECKS]


def _run(check: Check, path: Path) -> Outcome:
    if shutil.which(check.argv[0]) is None:
        return Outcome(check, "skipped", f"{check.argv[0]} is not installed")
    env = {**os.environ, "SLURM_CONF": str(path)} if check.slurm_conf else None
    argv = [arg.replace("{path}", str(path)) for arg in check.argv]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return Outcome(check, "failed", f"{check.consumer} did not answer within {TIMEOUT_S} s")
    except OSError as error:
        return Outcome(check, "failed", f"{check.consumer} could not be started: {error.strerror}")
    said = [line.strip() for line in (result.stdout + result.stderr).strip().splitlines()]
    if result.returncode < 0:
        return Outcome(check, "failed", " ".join([f"{check.consumer} {exit_status(result.returncode)}", *said[-3:]]))
    if result.returncode != 0:
        return Outcome(check, "failed", " ".join(said[-3:]))
    return Outcome(check, "passed", said[-1] if said and not check.slurm_conf else "parsed")
