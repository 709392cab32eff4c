"""Invariant `pools-exclusive`: nothing but the inference path can put a pod on Slurm's or unlent flex GPUs.

Only a NoSchedule taint keeps kube-scheduler off the slurm and flex nodes, so what keeps the pools apart is the
admission policy that refuses a GPU pod tolerating it (components/scheduling/pools.py). It is judged by what it does,
not by its text: the ValidatingAdmissionPolicies the render binds to deny in a namespace are evaluated with a CEL
engine, as the API server would (an error denies, as failurePolicy Fail does), on sample pods a team could create,
which must be denied, and on every pod the stack itself creates, which must be admitted.
"""

import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from components.site.wellknown import POOL_TAINT, TEAM_LABEL
from components.teams.plan import namespace_manifest
from runbooks.plan.producers import Deployed, pod_templates, selects


def _cel_evaluator() -> Any:
    """The CEL engine's compiled module (cel.cel of common-expression-language 0.10) without its package's __init__,
    which imports the package's REPL with it (`from . import cli`: typer, prompt_toolkit, pygments), 0.2 s of CPU
    before every `gpuctl plan`. Registered as cel.cel, so a later `import cel` uses this one: the extension may be
    initialized once per process."""
    loaded = sys.modules.get("cel.cel")
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("cel")  # finds the package without running its __init__
    spec = importlib.machinery.PathFinder.find_spec("cel.cel", package.submodule_search_locations) if package else None
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError("common-expression-language's compiled module cel.cel is not installed", name="cel")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["cel.cel"] = module
    return module


cel = _cel_evaluator()
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server sets on every Namespace to its name."""
GPU_LIMITS = {"limits": {"nvidia.com/gpu": "8"}}
PROBES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("tolerating the slurm pool's taint", {"tolerations": [
        {"key": POOL_TAINT, "operator": "Equal", "value": "slurm", "effect": "NoSchedule"}]}),
    ("tolerating the pool taint whatever its value", {"tolerations": [{"key": POOL_TAINT, "operator": "Exists"}]}),
    ("tolerating every taint", {"tolerations": [{"operator": "Exists"}]}),
    ("tolerating the flex pool's taint", {"tolerations": [
        {"key": POOL_TAINT, "operator": "Equal", "value": "flex", "effect": "NoSchedule"}]}),
    ("naming its node", {"nodeName": "gpu-node-01"}),
)
"""How a team's GPU pod could reach Slurm's or unlent flex GPUs, and the pod spec that tries it."""


def _pod(namespace: str, name: str, metadata: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {**metadata, "name": name, "namespace": namespace},
            "spec": spec}


def _probe(namespace: str, spec: dict[str, Any], gpu_in_init: bool = False) -> dict[str, Any]:
    container = {"name": "train", "image": "registry.example/train:1", "resources": GPU_LIMITS}
    where = "initContainers" if gpu_in_init else "containers"
    base = {"containers": [{"name": "main", "image": "registry.example/train:1"}]} if gpu_in_init else {}
    return _pod(namespace, "probe", {}, {**base, where: [container], **spec})


def _operator_pods(deployed: Deployed) -> Iterator[tuple[str, dict[str, Any]]]:
    """What the GPU Operator creates at run time that no render holds: its validator's CUDA and device-plugin workload
    pods, in the operator's namespace, each requesting a GPU on a named node with the validator DaemonSet's
    tolerations, which are the ClusterPolicy's daemonsets.tolerations (gpu-operator cmd/nvidia-validator/main.go,
    runWorkload; controllers/object_controls.go, applyCommonDaemonsetConfig)."""
    operator = next((d for d in deployed.of_kind("Deployment") if (d.get("metadata") or {}).get("name") ==
                     "gpu-operator"), None)
    for policy in deployed.of_kind("ClusterPolicy"):
        if operator is None:
            continue
        tolerations = ((policy.get("spec") or {}).get("daemonsets") or {}).get("tolerations") or []
        pod = _pod(operator["metadata"]["namespace"], "nvidia-cuda-validator", {}, {
            "nodeName": "gpu-node-01", "tolerations": tolerations,
            "containers": [{"name": "cuda-validation", "image": "nvcr.io/nvidia/cloud-native/gpu-operator-validator",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]})
        yield f"ClusterPolicy {policy['metadata']['name']} (the validator's CUDA workload pod)", pod


def _namespace(deployed: Deployed, name: str) -> dict[str, Any]:
    """The Namespace object as the API server holds it: the rendered one, with the name label it always sets."""
    rendered = next((n for n in deployed.of_kind("Namespace") if (n.get("metadata") or {}).get("name") == name), {})
    labels = {**((rendered.get("metadata") or {}).get("labels") or {}), NAMESPACE_NAME_LABEL: name}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _matches_pod_creation(policy: dict[str, Any]) -> bool:
    rules = ((policy.get("spec") or {}).get("matchConstraints") or {}).get("resourceRules") or []
    return any({"pods", "*"} & set(r.get("resources") or []) and {"CREATE", "*"} & set(r.get("operations") or [])
               and {"", "*"} & set(r.get("apiGroups") or []) for r in rules)


def _validations(deployed: Deployed, namespace: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(policy name, validation) of every policy that a Deny binding applies to pods created in the namespace. A
    binding without a namespaceSelector matches every namespace."""
    policies = {(p.get("metadata") or {}).get("name"): p for p in deployed.of_kind("ValidatingAdmissionPolicy")}
    for binding in deployed.of_kind("ValidatingAdmissionPolicyBinding"):
        spec = binding.get("spec") or {}
        policy = policies.get(spec.get("policyName"))
        selector = (spec.get("matchResources") or {}).get("namespaceSelector")
        if policy is None or "Deny" not in (spec.get("validationActions") or []) or not _matches_pod_creation(
                policy) or not selects({} if selector is None else selector, namespace["metadata"]["labels"]):
            continue
        for validation in (policy.get("spec") or {}).get("validations") or []:
            yield policy["metadata"]["name"], validation


def denials(deployed: Deployed, pod: dict[str, Any]) -> list[str]:
    """Why the API server would refuse creating the pod: `<policy>: <message>` per failing validation."""
    namespace = _namespace(deployed, pod["metadata"]["namespace"])
    context = {"object": pod, "oldObject": None, "namespaceObject": namespace, "request": {"operation": "CREATE"}}
    refused = []
    for policy, validation in _validations(deployed, namespace):
        try:
            admitted = cel.evaluate(validation["expression"], context) is True
        except (RuntimeError, ValueError, TypeError) as error:
            admitted, validation = False, {**validation, "message": f"CEL error: {error}"}
        if not admitted:
            refused.append(f"{policy}: {validation.get('message', validation['expression'])}")
    return refused


NEXT_TEAM = "next-team"
"""The team namespace judged where none is rendered (the first stage onboards no team): onboarding a team adds its
namespace and nothing that admits pods, so what would refuse its pods must be deployed already."""


def pools_exclusive(deployed: Deployed) -> list[str]:
    problems = []
    teams = sorted(str(n["metadata"]["name"]) for n in deployed.of_kind("Namespace")
                   if TEAM_LABEL in ((n.get("metadata") or {}).get("labels") or {}))
    if not teams:
        teams = [NEXT_TEAM]
        deployed = replace(deployed, objects=[*deployed.objects, namespace_manifest(NEXT_TEAM)])
    for team in teams:
        refused = denials(deployed, _probe(team, {}))
        if refused:
            problems.append(f"a GPU pod in team namespace {team} that tolerates no pool taint is refused "
                            f"({'; '.join(refused)}): Kueue's jobs could never start")
        samples = [(what, _probe(team, spec)) for what, spec in PROBES]
        samples.append(("tolerating the slurm pool's taint, its GPUs in an init container",
                        _probe(team, dict(PROBES[0][1]), gpu_in_init=True)))
        problems += [f"nothing refuses a GPU pod in team namespace {team} {what}: it would get GPUs Slurm also hands "
                     "out" for what, pod in samples if not denials(deployed, pod)]
    for obj in deployed.objects:
        metadata = obj.get("metadata") or {}
        for template in pod_templates(obj):
            pod = _pod(metadata.get("namespace") or "default", f"{metadata.get('name')}-0",
                       template.get("metadata") or {}, template.get("spec") or {})
            refused = denials(deployed, pod)
            if refused:
                problems.append(f"{obj['kind']} {pod['metadata']['namespace']}/{metadata.get('name')}: its pods are "
                                f"refused ({'; '.join(refused)}), and the stack itself creates them")
    for what, pod in _operator_pods(deployed):
        refused = denials(deployed, pod)
        if refused:
            problems.append(f"{what} in {pod['metadata']['namespace']}: refused ({'; '.join(refused)}), and the GPU "
                            "Operator creates it on every GPU node to validate the driver and device plugin")
    return problems
