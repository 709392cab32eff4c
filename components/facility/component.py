"""The physical hierarchy, Facility > Rack > GpuNode, carrying the power and cooling plan.

The figures and verdicts are each component's props (what Analyze sees) and outputs (what
AnalyzeStack sees), so the policy pack judges the same numbers the spec checks used. A GpuNode is
admitted only after it proves itself: the node-check program runs on it over SSH, and its verdict
sets the node's Kubernetes labels and taints and whether it may join Slurm.
"""

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_kubernetes as kubernetes

from components.facility.admission import (
    CHECK_COPY,
    CHECK_VERSION,
    Verdict,
    check_command,
    node_labels,
    node_taints,
    parse_result,
)
from components.facility.power import NodeLoad, RackPlan, plan_racks
from components.site.derived import nodes_by_name
from components.site.site import Node, Site
from components.site.wellknown import FACILITY_TYPE, GPU_NODE_TYPE, RACK_TYPE, REASON_ANNOTATION
from hosts import NODE_CHECK_ASSET


def _kw(value: float) -> float:
    return round(value, 3)


@dataclass(frozen=True)
class NodeAdmission:
    """What admitting a node needs beyond the spec: the SSH key and the BMC password, Pulumi secrets."""

    site: Site
    ssh_private_key: pulumi.Output[str]
    bmc_password: pulumi.Output[str]
    """The node check asks each node's BMC for its PSUs with site.bmc_user and this; it reaches the check on stdin."""

    def node(self, name: str) -> Node:
        return nodes_by_name(self.site)[name]


class GpuNode(pulumi.ComponentResource):
    verdict: pulumi.Output[Verdict]
    """The node check's verdict: Kubernetes labels and taints follow it, and Slurm drains a failed node."""
    admission: kubernetes.core.v1.NodePatch
    """The verdict's labels and taints on the Kubernetes node: what work that schedules on validated nodes waits for
    (it comes after the node's check and the check's copy)."""

    def __init__(self, load: NodeLoad, admission: NodeAdmission, opts: pulumi.ResourceOptions) -> None:
        facts: dict[str, Any] = {
            "rack": load.rack,
            "node_group": load.group,
            "pool": load.pool,
            "gpu_model": load.gpu_model,
            "gpu_class": load.gpu_class.value,
            "gpu_count": load.gpus,
            "draw_kw": _kw(load.draw_kw),
        }
        super().__init__(GPU_NODE_TYPE, load.name, facts, opts)
        self.node_name = load.name
        self.verdict = verdict = self._run_node_check(load, admission)
        self.admission = kubernetes.core.v1.NodePatch(
            f"{load.name}-admission",
            metadata=kubernetes.meta.v1.ObjectMetaPatchArgs(
                name=load.name,
                labels=verdict.apply(lambda v: node_labels(load, v)),
                annotations={REASON_ANNOTATION: verdict.apply(lambda v: v.reason)},
            ),
            spec=kubernetes.core.v1.NodeSpecPatchArgs(
                taints=verdict.apply(lambda v: [kubernetes.core.v1.TaintPatchArgs(**t) for t in node_taints(load, v)]),
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({**facts, "validated": verdict.apply(lambda v: v.validated),
                               "validation_reason": verdict.apply(lambda v: v.reason)})

    def _run_node_check(self, load: NodeLoad, admission: NodeAdmission) -> pulumi.Output[Verdict]:
        connection = command.remote.ConnectionArgs(
            host=admission.node(load.name).ssh_host,
            user=admission.site.ssh_user,
            private_key=admission.ssh_private_key,
        )
        copy = command.remote.CopyToRemote(
            f"{load.name}-node-check-copy",
            connection=connection,
            source=pulumi.FileAsset(NODE_CHECK_ASSET),
            remote_path=CHECK_COPY,
            triggers=[CHECK_VERSION],
            opts=pulumi.ResourceOptions(parent=self),
        )
        # A new check version re-validates; a changed expectation changes `create`, which re-runs it.
        check = command.remote.Command(
            f"{load.name}-node-check",
            connection=connection,
            create=check_command(admission.site, load),
            stdin=admission.bmc_password.apply(lambda password: f"{password}\n"),
            triggers=[CHECK_VERSION],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[copy]),
        )
        return check.stdout.apply(parse_result)


class Rack(pulumi.ComponentResource):
    def __init__(self, plan: RackPlan, admission: NodeAdmission, opts: pulumi.ResourceOptions) -> None:
        rack = plan.rack
        facts: dict[str, Any] = {
            "room": rack.room,
            "power_budget_kw": rack.power_budget_kw,
            "headroom_pct": rack.headroom_pct,
            "usable_kw": _kw(plan.usable_kw),
            "it_load_kw": _kw(plan.it_load_kw),
            "heat_load_kw": _kw(plan.heat_load_kw),
            "cooling_type": rack.cooling.type.value,
            "cooling_capacity_kw": rack.cooling.capacity_kw,
            "feed_capacity_kw": {feed: _kw(kw) for feed, kw in plan.feed_capacity_kw.items()},
            "gpu_count": plan.gpu_count,
            "verdicts": plan.verdicts,
        }
        super().__init__(RACK_TYPE, rack.name, facts, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.nodes = [GpuNode(load, admission, child) for load in plan.nodes]
        self.register_outputs(facts)


class Facility(pulumi.ComponentResource):
    def __init__(self, name: str, admission: NodeAdmission, opts: pulumi.ResourceOptions) -> None:
        super().__init__(FACILITY_TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        plans = plan_racks(admission.site)
        self.racks = [Rack(plan, admission, child) for plan in plans]
        self.nodes = [node for rack in self.racks for node in rack.nodes]
        self.admissions = [node.admission for node in self.nodes]
        self.gpu_count = sum(p.gpu_count for p in plans)
        self.it_load_kw = _kw(sum(p.it_load_kw for p in plans))
        self.register_outputs({"gpu_count": self.gpu_count, "it_load_kw": self.it_load_kw})
