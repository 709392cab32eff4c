"""Scheduling on Kubernetes: the PriorityClasses of the one preemption table, Kueue with its flavors and queues, and
what the lending and health controllers' kubectl may do (components.scheduling.controller_access).

The Slurm side of the same table is rendered by components.slurm.conf; components.scheduling.preemption holds
both to one order. Kueue objects are created after its chart (which brings the CRDs), flavors before the queues
naming them.
"""

import pulumi
import pulumi_kubernetes as kubernetes

from components.charts import KUEUE
from components.k8s import custom, fields, rbac, release
from components.scheduling.controller_access import flex_controller_access, health_controller_access
from components.scheduling.kueue import (
    KUEUE_RELEASE,
    NAMESPACE,
    chart_values,
    cluster_queues,
    flavors,
    resource_flavor,
    scheduling_facts,
)
from components.scheduling.pools import pools_exclusive_binding, pools_exclusive_policy
from components.scheduling.preemption import priority_class_manifest, priority_classes
from components.site.site import Site
from components.site.wellknown import SCHEDULING_TYPE


class Scheduling(pulumi.ComponentResource):
    def __init__(self, name: str, site: Site, opts: pulumi.ResourceOptions) -> None:
        facts = scheduling_facts(site)
        super().__init__(SCHEDULING_TYPE, name, facts, opts)
        for pc in priority_classes(site):
            manifest = priority_class_manifest(pc)
            kubernetes.scheduling.v1.PriorityClass(
                f"{name}-{pc.name}", metadata=manifest["metadata"], value=manifest["value"],
                global_default=manifest["globalDefault"], preemption_policy=manifest["preemptionPolicy"],
                description=manifest["description"], opts=pulumi.ResourceOptions(parent=self),
            )
        # Before any team or inference pod: the API server keeps GPU pods off Slurm's and unlent flex nodes.
        pools = kubernetes.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-pools-exclusive", **fields(pools_exclusive_policy()), opts=pulumi.ResourceOptions(parent=self))
        kubernetes.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-pools-exclusive-binding", **fields(pools_exclusive_binding(site)),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[pools]))
        # What the lending and health controllers' kubeconfigs may do (the Role for the replica floor comes with the
        # inference path, which names the ScaledObjects).
        for manifest in [*flex_controller_access(site), *health_controller_access(site)]:
            rbac(f"{name}-{manifest['metadata']['name']}-{manifest['kind'].lower()}", manifest,
                 pulumi.ResourceOptions(parent=self))
        ns = kubernetes.core.v1.Namespace(f"{name}-kueue-namespace", metadata={"name": NAMESPACE},
                                          opts=pulumi.ResourceOptions(parent=self))
        kueue = release(f"{name}-kueue", KUEUE, NAMESPACE, chart_values(site), self, [ns], mirror=site.mirror,
                        release_name=KUEUE_RELEASE)
        after_kueue = pulumi.ResourceOptions(parent=self, depends_on=[kueue])
        made = [kubernetes.apiextensions.CustomResource(f"{name}-flavor-{f.name}", **custom(resource_flavor(f)),
                                                        opts=after_kueue) for f in flavors(site)]
        for queue in cluster_queues(site):
            kubernetes.apiextensions.CustomResource(
                f"{name}-{queue['metadata']['name']}", **custom(queue),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[kueue, *made]),
            )
        self.register_outputs(facts)
