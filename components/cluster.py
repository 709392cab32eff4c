"""GpuCluster: the one stack, composed of one component per concern."""

import pulumi

from components.facility.component import Facility, NodeAdmission
from components.gpu_operator.component import GpuOperator
from components.inference.component import InferencePath
from components.monitoring.component import MonitoringStack
from components.scheduling.component import Scheduling
from components.site.wellknown import CLUSTER_TYPE
from components.slurm.component import Slurm
from components.storage.component import ColdTier, StorageTiers
from components.teams.component import Team
from components.teams.plan import team_plans


def after(parent: pulumi.Resource, *earlier: pulumi.Resource) -> pulumi.ResourceOptions:
    """Options for a component whose every resource waits for `earlier`. A component's depends_on is not passed to
    its children (pulumi/pulumi#8721: children are created alongside it); its transformations are, so one adds the
    dependency to each resource the component creates."""

    def depend(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult:
        return pulumi.ResourceTransformationResult(
            args.props, pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(depends_on=list(earlier))))

    return pulumi.ResourceOptions(parent=parent, depends_on=list(earlier), transformations=[depend])


class GpuCluster(pulumi.ComponentResource):
    def __init__(self, name: str, admission: NodeAdmission, gateway_master_key: pulumi.Input[str],
                 munge_key: pulumi.Output[str], opts: pulumi.ResourceOptions | None = None) -> None:
        site = admission.site
        super().__init__(CLUSTER_TYPE, name, {"site_name": site.site_name, "stage": site.stage}, opts)
        # Observability first: nothing admits a node or serves a GPU before the monitoring stack exists. Its metric
        # volumes are of the cold tier's StorageClass, so that tier alone comes before it (a release waiting on a
        # claim whose class does not exist yet fails, and everything behind monitoring with it).
        cold_tier = ColdTier(f"{name}-cold-tier", f"{name}-storage", site.mirror,
                             pulumi.ResourceOptions(parent=self))
        self.monitoring = MonitoringStack(f"{name}-monitoring", site, after(self, cold_tier))
        after_monitoring = after(self, self.monitoring)
        self.gpu_operator = GpuOperator(f"{name}-gpu-operator", site, after_monitoring)
        # A node proves itself on the operator's driver: its check starts once the operator is installed (and then
        # waits, bounded, for the driver on its node), so a first `pulumi up` converges.
        self.facility = Facility(f"{name}-facility", admission, after(self, self.monitoring, self.gpu_operator))
        self.storage = StorageTiers(f"{name}-storage", site, cold_tier, after_monitoring)
        self.scheduling = Scheduling(f"{name}-scheduling", site, after_monitoring)
        self.slurm = Slurm(f"{name}-slurm", site, admission.ssh_private_key, munge_key, self.facility.nodes,
                           after_monitoring)
        # One Team per onboarded team; its name depends only on the team, so a later stage only adds Teams.
        team_opts = after(self, self.monitoring, self.scheduling, self.storage)
        self.teams = [Team(f"{name}-team-{plan.name}", plan, team_opts) for plan in team_plans(site)]
        # Served models wait for their priority class and NVMe prefetch; teams' gateway keys for their namespaces.
        # Model servers schedule only on validated nodes (components/inference/values.py, _placement), which the
        # node checks' NodePatches label: the inference path waits for admission, or its release would wait on
        # pods no node can take yet. It names the NodePatches (each comes after its node's check and copy), not the
        # Facility: the SDK expands a component named in depends_on into every resource under it, for each resource
        # that names it, copying the dependency set at each one added (pulumi/runtime/resource_cycle_breaker.py),
        # which at 8,192 GPUs was 4,394 resources for each of the path's and a quarter of the program's CPU.
        self.inference = InferencePath(f"{name}-inference", site, gateway_master_key,
                                       {t.plan_name: t for t in self.teams},
                                       after(self, self.monitoring, self.scheduling, self.storage,
                                             *self.facility.admissions))
        self.gpu_count = self.facility.gpu_count
        self.register_outputs({"gpu_count": self.gpu_count, "stage": site.stage})
