"""What the Slurm component installs on the controller and the nodes over SSH: files, units and the commands that put
them in place. Pure: no pulumi."""

import base64
import hashlib
import re
import shlex
from typing import Any

from components.facility.admission import Verdict
from components.scheduling.preemption import slurm_qos
from components.slurm.conf import (
    EPILOG,
    EXPORTER,
    EXPORTER_UNIT,
    MOVER,
    PROLOG,
    partitions,
    render_cgroup_conf,
    render_epilog,
    render_exporter_unit,
    render_gres_conf,
    render_prolog,
    render_slurm_conf,
    render_slurmdbd_conf,
    render_tier_mounts,
)
from components.slurm.containers import ENROOT_TMPFILES, node_container_files, submit_files
from components.spec.site import Site
from components.spec.wellknown import COLD_FILESYSTEM, HPC_JOB_MAPPING_DIR
from components.teams.plan import NFS_MOUNT_OPTIONS
from hosts import CHECKPOINT_MOVER, SLURM_EXPORTER

CONFIG_DIR = "/etc/slurm"


SLURMD_DEFAULTS = "/etc/default/slurmd"


SYSTEMD_UNIT_DIR = "/etc/systemd/system"


CONTROLLER_RESTART = (f"systemctl daemon-reload && systemctl enable {EXPORTER_UNIT} "
                      f"&& systemctl restart slurmdbd slurmctld {EXPORTER_UNIT} && scontrol reconfigure")


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
            EXPORTER: (SLURM_EXPORTER.read_text(), 0o644),
            f"{SYSTEMD_UNIT_DIR}/{EXPORTER_UNIT}": (render_exporter_unit(site), 0o644)}


def node_files(site: Site) -> dict[str, tuple[str, int]]:
    """What every Slurm node holds, the same on each: Debian's slurmd.service reads SLURMD_OPTIONS from
    /etc/default/slurmd; the job scripts and the mover they start; the tier mount units; what containerised steps
    need to get the GPU Operator's driver (components.slurm.containers)."""
    server = f"{site.slurm.controller_host}:{site.slurm.slurmctld_port}"
    files = {SLURMD_DEFAULTS: (f'SLURMD_OPTIONS="--conf-server {server}"\n', 0o644),
             PROLOG: (render_prolog(HPC_JOB_MAPPING_DIR), 0o755),
             EPILOG: (render_epilog(site, HPC_JOB_MAPPING_DIR), 0o755),
             MOVER: (CHECKPOINT_MOVER.read_text(), 0o644),
             **node_container_files()}
    for unit, content in tier_mounts(site).items():
        files[f"{SYSTEMD_UNIT_DIR}/{unit}"] = (content, 0o644)
    return files


def tier_mounts(site: Site) -> dict[str, str]:
    return render_tier_mounts(site, NFS_MOUNT_OPTIONS, COLD_FILESYSTEM)


def node_command(site: Site) -> str:
    """Mounts the tiers (enabling a mounted unit again is a no-op), makes enroot's directories, then (re)starts
    slurmd."""
    units = " ".join(shlex.quote(unit) for unit in tier_mounts(site))
    return (f"systemctl daemon-reload && systemctl enable --now {units} "
            f"&& systemd-tmpfiles --create {ENROOT_TMPFILES} && systemctl enable slurmd && systemctl restart slurmd")


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
