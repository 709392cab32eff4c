"""GpuCluster: the one stack, composed of one component per concern."""

import pulumi

from components.facility import Facility, NodeAdmission

CLUSTER_TYPE = "gpucluster:cluster:GpuCluster"


class GpuCluster(pulumi.ComponentResource):
    def __init__(self, name: str, admission: NodeAdmission, opts: pulumi.ResourceOptions | None = None) -> None:
        site = admission.site
        super().__init__(CLUSTER_TYPE, name, {"site_name": site.site_name, "stage": site.stage}, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.facility = Facility(f"{name}-facility", admission, child)
        self.gpu_count = self.facility.gpu_count
        self.register_outputs({"gpu_count": self.gpu_count, "stage": site.stage})
