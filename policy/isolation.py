"""Each team reaches only its own hot storage, as the API server would decide it.

For every team namespace (a Namespace labelled `gpucluster.io/team`) and every team's hot StorageClass (an
`nfs.csi.k8s.io` class labelled `gpucluster.io/team`), the ValidatingAdmissionPolicies whose bindings deny in that
namespace are evaluated, with a CEL engine, on the claims and pods a member could create: a claim on another team's
class and a pod mounting NFS directly must be denied, a claim on the team's own class admitted. The policies'
expressions are judged by what they do, not by their text.
"""

import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

from common import TEAM_LABEL, ViolationError, describe, fact, of_type, text
from pulumi_policy import PolicyResource, ReportViolation, StackValidationArgs, StackValidationPolicy


def _cel_engine() -> ModuleType:
    """The CEL engine's compiled module (cel.cel of common-expression-language 0.10) without its package's __init__,
    which imports the package's REPL with it (`from . import cli`: typer, prompt_toolkit, pygments), most of the pack
    process's import time. Registered as cel.cel, so a later `import cel` uses this one: the extension may be
    initialized once per process. (runbooks/plan/admission.py loads it the same way; the pack imports nothing of the
    project.)"""
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


cel = _cel_engine()

NAMESPACE_TYPE = "kubernetes:core/v1:Namespace"
STORAGE_CLASS_TYPE = "kubernetes:storage.k8s.io/v1:StorageClass"
POLICY_TYPE = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
BINDING_TYPE = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
NFS_PROVISIONER = "nfs.csi.k8s.io"


def _labels(resource: PolicyResource) -> dict[str, str]:
    return dict(fact(resource, "metadata", {}).get("labels") or {})


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    tests = {"In": lambda e: labels.get(e["key"]) in e.get("values", []),
             "NotIn": lambda e: labels.get(e["key"]) not in e.get("values", []),
             "Exists": lambda e: e["key"] in labels, "DoesNotExist": lambda e: e["key"] not in labels}
    return all(tests[e["operator"]](e) for e in selector.get("matchExpressions") or [])


def _denying_validations(args: StackValidationArgs, namespace: dict[str, Any]) -> list[str]:
    """The CEL expressions the API server evaluates, denying, on a claim or pod in this namespace."""
    policies = {text(p, "metadata.name"): p for p in of_type(args, POLICY_TYPE)}
    expressions = []
    for binding in of_type(args, BINDING_TYPE):
        spec = fact(binding, "spec")
        selector = (spec.get("matchResources") or {}).get("namespaceSelector") or {}
        policy = policies.get(spec.get("policyName", ""))
        if "Deny" in (spec.get("validationActions") or []) and policy and _selects(selector, namespace["metadata"][
                "labels"]):
            expressions += [v["expression"] for v in fact(policy, "spec").get("validations") or []]
    return expressions


def admitted(expressions: list[str], obj: dict[str, Any], namespace: dict[str, Any]) -> bool:
    """Whether every expression holds for `obj` created in `namespace` (an error denies, as failurePolicy Fail)."""
    context = {"object": obj, "namespaceObject": namespace, "oldObject": None}
    try:
        return all(cel.evaluate(expression, context) is True for expression in expressions)
    except (RuntimeError, ValueError, TypeError):
        return False


def claim(namespace: str, storage_class: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "probe", "namespace": namespace},
            "spec": {"storageClassName": storage_class, "accessModes": ["ReadWriteMany"]}}


def nfs_pod(namespace: str, server: str, share: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "volumes": [{"name": "share", "nfs": {"server": server, "path": share}}]}}


def validate_isolated(args: StackValidationArgs, report: ReportViolation) -> None:
    classes = [(c, _labels(c).get(TEAM_LABEL)) for c in of_type(args, STORAGE_CLASS_TYPE)
               if fact(c, "provisioner", "") == NFS_PROVISIONER and TEAM_LABEL in _labels(c)]
    for ns in of_type(args, NAMESPACE_TYPE):
        team = _labels(ns).get(TEAM_LABEL)
        if not team:
            continue
        name = text(ns, "metadata.name")
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": _labels(ns)}}
        expressions = _denying_validations(args, namespace)
        try:
            faults = []
            for storage_class, owner in classes:
                class_name = text(storage_class, "metadata.name")
                allowed = admitted(expressions, claim(name, class_name), namespace)
                if owner != team and allowed:
                    faults.append(f"a claim on team {owner}'s {class_name} is admitted")
                if owner == team and not allowed:
                    faults.append(f"a claim on its own {class_name} is denied")
                parameters = fact(storage_class, "parameters", {})
                if owner != team and admitted(expressions, nfs_pod(name, str(parameters.get("server")),
                                                                   str(parameters.get("share"))), namespace):
                    faults.append(f"a pod mounting team {owner}'s share by NFS is admitted")
        except ViolationError as problem:
            report(str(problem), ns.urn)
            continue
        if faults:
            report(f"{describe(ns)} (team {team}): {'; '.join(faults)}", ns.urn)


TEAM_STORAGE_ISOLATED = StackValidationPolicy(
    name="team-storage-isolated",
    description="In a team's namespace the API server admits claims on the team's own hot StorageClass only, and no "
                "pod that mounts NFS itself.",
    validate=validate_isolated,
)

POLICIES = [TEAM_STORAGE_ISOLATED]
