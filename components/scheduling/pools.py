"""Slurm's GPUs stay Slurm's, and the flex pool's go only to inference, whatever a pod asks for at admission.

The slurm and flex nodes carry the pool taint (`gpucluster.io/pool=<pool>:NoSchedule`, components/facility/
admission.py), and only the taint keeps kube-scheduler off them: a team pod that tolerates it would get GPUs Slurm
also hands out. A ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30; CEL over the pod
and its namespace, no webhook to run) therefore refuses a pod that requests GPUs and
- tolerates the slurm pool's taint, anywhere;
- tolerates the flex pool's taint outside the inference namespace (lent flex nodes serve the model servers, which
  tolerate it, components/inference/values.py);
- names its node itself at creation, which bypasses the scheduler and with it every NoSchedule taint.
Node agents (device plugin, DCGM, node-exporter, CSI) tolerate the pool taint but request no GPU, so they pass. The
GPU Operator's namespace is not bound: its validator starts short GPU pods on every GPU node, by node name, to prove
the driver and device plugin work (gpu-operator validator, plugin and CUDA workload validation).
"""

from typing import Any

from components.site.site import Pool, Site
from components.site.wellknown import INFERENCE_NAMESPACE, POOL_TAINT

POOLS_POLICY = "pools-exclusive"
GPU_RESOURCE = "nvidia.com/gpu"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server sets on every Namespace to its name."""

REQUESTS_GPU = (
    "object.kind == 'Pod' && "
    "(object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])).exists(c, "
    f"has(c.resources) && ((has(c.resources.requests) && '{GPU_RESOURCE}' in c.resources.requests) || "
    f"(has(c.resources.limits) && '{GPU_RESOURCE}' in c.resources.limits)))")
"""CEL: the object is a pod and some container of it requests GPUs (a limit alone sets the request to it)."""


def tolerates_pool(pool: Pool) -> str:
    """CEL: some toleration of the pod tolerates the pool's taint, as Kubernetes matches them: an empty effect
    matches every effect, Exists with an empty key every taint, Equal the key and value."""
    return ("has(object.spec.tolerations) && object.spec.tolerations.exists(t, "
            "(!has(t.effect) || t.effect == '' || t.effect == 'NoSchedule') && "
            f"((has(t.operator) && t.operator == 'Exists' && (!has(t.key) || t.key == '' || t.key == '{POOL_TAINT}')) "
            f"|| ((!has(t.operator) || t.operator == 'Equal') && has(t.key) && t.key == '{POOL_TAINT}' && "
            f"has(t.value) && t.value == '{pool.value}')))")


def pools_exclusive_policy() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POOLS_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["pods"]}]},
            "validations": [
                {"expression": f"!({REQUESTS_GPU}) || !({tolerates_pool(Pool.SLURM)})",
                 "message": f"a GPU pod may not tolerate the slurm pool's taint ({POOL_TAINT}={Pool.SLURM.value}): "
                            "Slurm hands out those GPUs"},
                {"expression": f"!({REQUESTS_GPU}) || namespaceObject.metadata.name == '{INFERENCE_NAMESPACE}' || "
                               f"!({tolerates_pool(Pool.FLEX)})",
                 "message": f"only the inference path's GPU pods may tolerate the flex pool's taint "
                            f"({POOL_TAINT}={Pool.FLEX.value}): a flex node is Slurm's until lent to inference"},
                {"expression": f"request.operation != 'CREATE' || !({REQUESTS_GPU}) || !has(object.spec.nodeName) || "
                               "object.spec.nodeName == ''",
                 "message": "a GPU pod may not name its node: only the scheduler, which honours the pools' taints, "
                            "places GPU pods"},
            ],
        },
    }


def pools_exclusive_binding(site: Site) -> dict[str, Any]:
    """Binds the policy, denying, to every namespace but the GPU Operator's."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POOLS_POLICY},
        "spec": {"policyName": POOLS_POLICY, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchExpressions": [
                     {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": [site.gpu_operator.namespace]}]}}},
    }
