"""Slurm beside Kubernetes, deployed with pulumi-command over SSH from the rendered configuration.

The controller gets slurm.conf, gres.conf, cgroup.conf and slurmdbd.conf; every Slurm node gets the
first three. Each command carries the files' content, so the daemons restart only when it changes.
Accounting (QoS and team accounts) is applied on the controller with idempotent sacctmgr calls. A
node the node check failed is drained with the check's reason (`sinfo -R` shows it), so Slurm
schedules nothing on it; a validated node is resumed.
"""

import base64
import functools
import hashlib
import shlex
from typing import Any

import pulumi
import pulumi_command as command

from components.facility import GpuNode
from components.node_validation import Verdict
from components.preemption import slurm_qos
from components.site import Site
from components.slurm_config import (
    ALREADY_PRESENT,
    partitions,
    render_accounting_commands,
    render_cgroup_conf,
    render_gres_conf,
    render_slurm_conf,
    render_slurmdbd_conf,
    slurm_nodes,
)

SLURM_TYPE = "gpucluster:slurm:Slurm"
CONFIG_DIR = "/etc/slurm"


def install_script(files: dict[str, tuple[str, int]], restart: str, config_dir: str = CONFIG_DIR) -> str:
    """A shell script that writes each file (content, mode) under config_dir, then restarts `restart`.
    Content travels base64-encoded so no quoting can change it."""
    steps = [f"install -d -m 0755 {config_dir}"]
    for name, (content, mode) in files.items():
        encoded = base64.b64encode(content.encode()).decode()
        path = f"{config_dir}/{name}"
        steps.append(f"echo {encoded} | base64 -d > {path}.new && chmod {mode:o} {path}.new && mv {path}.new {path}")
    steps.append(f"systemctl restart {restart}")
    return " && ".join(steps)


def accounting_script(site: Site) -> str:
    """Runs every sacctmgr command; an `add` that finds its object there already (exit 1) counts as done."""
    already = " ".join(f"-e {shlex.quote(marker)}" for marker in ALREADY_PRESENT)
    steps = []
    for argv in render_accounting_commands(site):
        steps.append(f"out=$({shlex.join(argv)} 2>&1) || printf '%s' \"$out\" | grep -qF {already} "
                     f"|| {{ printf '%s\\n' \"$out\" >&2; exit 1; }}")
    return "set -u; " + "; ".join(steps)


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


class Slurm(pulumi.ComponentResource):
    def __init__(self, name: str, site: Site, ssh_private_key: pulumi.Output[str], nodes: list[GpuNode],
                 opts: pulumi.ResourceOptions) -> None:
        facts = slurm_facts(site)
        super().__init__(SLURM_TYPE, name, facts, opts)
        node_files = {"slurm.conf": (render_slurm_conf(site), 0o644), "gres.conf": (render_gres_conf(site), 0o644),
                      "cgroup.conf": (render_cgroup_conf(), 0o644)}
        controller_files = {**node_files, "slurmdbd.conf": (render_slurmdbd_conf(site), 0o600)}

        def connection(host: str) -> command.remote.ConnectionArgs:
            return command.remote.ConnectionArgs(host=host, user=site.ssh_user, private_key=ssh_private_key)

        controller = connection(site.slurm.controller_host)
        configured = command.remote.Command(
            f"{name}-controller-config", connection=controller,
            create=install_script(controller_files, "slurmdbd slurmctld"),
            triggers=[_digest(controller_files)], opts=pulumi.ResourceOptions(parent=self),
        )
        command.remote.Command(
            f"{name}-accounting", connection=controller, create=accounting_script(site),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[configured]),
        )
        by_name = {node.node_name: node for node in nodes}
        for node in slurm_nodes(site):
            installed = command.remote.Command(
                f"{name}-{node.name}-config", connection=connection(node.ssh_host),
                create=install_script(node_files, "slurmd"), triggers=[_digest(node_files)],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[configured]),
            )
            command.remote.Command(
                f"{name}-{node.name}-admission", connection=controller,
                create=by_name[node.name].verdict.apply(functools.partial(admission_command, node.name)),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[installed]),
            )
        self.register_outputs(facts)


def _digest(files: dict[str, tuple[str, int]]) -> str:
    return hashlib.sha256("".join(f"{n}:{m}:{c}" for n, (c, m) in sorted(files.items())).encode()).hexdigest()[:16]
