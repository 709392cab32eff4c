"""Whether a first `pulumi up` on an empty cluster converges: judged on the program's dependency graph (what each
resource waits for, as it registered it) and on what each resource creates (a Helm release's rendered objects, or
the object a resource registers), never on the order a component means to create things in.

A resource is created once everything it depends on is; so a consumer finds what it needs only when the resource
that creates it is one it depends on, directly or through others, or is itself. A Helm release that waits fails
when its workloads are not ready within its timeout, and everything behind it is skipped.
"""

from collections.abc import Iterable, Iterator
from typing import Any

from runbooks.offline.engine import ResourceGraph
from runbooks.plan.helm import RELEASE_TYPE, RenderedRelease
from runbooks.plan.producers import Deployed, Install, pod_templates

NODE_PATCH_TYPE = "kubernetes:core/v1:NodePatch"
RELEASE_WAIT_S = 300
"""s a Helm release waits for its workloads when the program sets no `timeout` and does not skip the wait
(pulumi-kubernetes provider/pkg/provider/helm_release.go: defaultTimeoutSeconds, applied in setDefaults)."""

BUILTIN_GROUPS = frozenset({
    # The API groups Kubernetes 1.30 serves itself (`kubectl api-resources`); every other group is a CRD's.
    "", "apps", "batch", "policy", "autoscaling", "rbac.authorization.k8s.io", "networking.k8s.io",
    "storage.k8s.io", "scheduling.k8s.io", "admissionregistration.k8s.io", "apiextensions.k8s.io",
    "apiregistration.k8s.io", "coordination.k8s.io", "discovery.k8s.io", "node.k8s.io", "certificates.k8s.io",
    "flowcontrol.apiserver.k8s.io", "events.k8s.io", "authentication.k8s.io", "authorization.k8s.io",
})

KUBERNETES_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
"""Namespaces the cluster has before anything is installed (Kubernetes docs, "Namespaces": initial namespaces)."""

PROBE_DEFAULTS = {"initialDelaySeconds": 0, "periodSeconds": 10, "failureThreshold": 3}
"""Kubernetes' Probe defaults (API reference, core/v1 Probe)."""

WAITED_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet"})
"""What Helm's wait waits to be ready besides claims and Services (helm.sh/helm/v3 pkg/kube/ready.go); Jobs only with
waitForJobs, which the stack does not set."""

SECRET_NAME_FLAGS = ("--secret-name=", "--cert-secret-name=")
"""Container flags with which a rendered program names the Secret it creates at run time: kube-webhook-certgen's
`create --secret-name` (kube-prometheus-stack's admission Job), KEDA's operator `--cert-secret-name` with
`--enable-cert-rotation` (keda chart templates/manager/deployment.yaml)."""


def installs(graph: ResourceGraph, releases: Iterable[RenderedRelease],
             registered: dict[str, dict[str, Any]]) -> tuple[Install, ...]:
    """Per resource that creates Kubernetes objects, those objects, its wait and everything it waits for.

    registered: the object each registering resource creates, by URN (the same dicts the plan judges)."""
    by_release = {(r.release, r.namespace): r for r in releases}
    made = []
    for urn, resource in graph.resources.items():
        if resource.type == RELEASE_TYPE:
            inputs = resource.inputs
            rendered = by_release.get((inputs.get("name") or resource.name, inputs.get("namespace", "default")))
            wait = None if inputs.get("skipAwait") else int(inputs.get("timeout", RELEASE_WAIT_S))
            made.append(Install(urn, rendered.objects if rendered else [], wait, waits_for(graph, urn)))
        elif urn in registered:
            made.append(Install(urn, [registered[urn]], None, waits_for(graph, urn)))
        elif resource.type == NODE_PATCH_TYPE:
            # Labels and taints on a node that exists: what pods that select on those labels wait for.
            made.append(Install(urn, [{"apiVersion": "v1", "kind": "Node", **resource.inputs}], None,
                                waits_for(graph, urn)))
    return tuple(made)


def waits_for(graph: ResourceGraph, urn: str) -> frozenset[str]:
    """Every resource `urn` is created after: its dependencies and a custom parent, transitively. A component's
    dependencies do not hold back its children (pulumi/pulumi#8721), and a dependency on a component is one on each
    custom resource inside it."""
    seen: set[str] = set()
    todo = [urn]
    while todo:
        resource = graph.resources[todo.pop()]
        edges = list(resource.dependencies)
        if resource.parent in graph.resources and graph.resources[resource.parent].custom:
            edges.append(resource.parent)
        for edge in edges:
            for target in _custom(graph, edge):
                if target not in seen:
                    seen.add(target)
                    # A URN the program did not register (one it read) has no dependencies of its own here.
                    if target in graph.resources:
                        todo.append(target)
    return frozenset(seen)


def _custom(graph: ResourceGraph, urn: str) -> list[str]:
    if urn not in graph.resources or graph.resources[urn].custom:
        return [urn]
    return [r.urn for r in graph.resources.values() if r.custom and urn in {a.urn for a in graph.ancestors(r.urn)}]


def _named(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    where = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
    return f"{obj.get('kind')} {where}{metadata.get('name')}"


def _short(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def pod_specs(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if obj.get("kind") == "Pod":
        yield obj.get("spec") or {}
    for template in pod_templates(obj):
        yield template.get("spec") or {}


def claimed_classes(obj: dict[str, Any]) -> Iterator[tuple[str | None, str]]:
    """(StorageClass, where) of every volume claim the object makes or has an operator make."""
    spec = obj.get("spec") or {}
    kind, group = obj.get("kind"), _group(obj)
    if kind == "PersistentVolumeClaim":
        yield spec.get("storageClassName"), "spec.storageClassName"
    elif kind == "StatefulSet":
        for i, template in enumerate(spec.get("volumeClaimTemplates") or []):
            yield (template.get("spec") or {}).get("storageClassName"), \
                f"spec.volumeClaimTemplates[{i}].spec.storageClassName"
    elif group == "monitoring.coreos.com" and (spec.get("storage") or {}).get("volumeClaimTemplate"):
        # The Prometheus operator makes the StatefulSet's claims from spec.storage.volumeClaimTemplate.
        template = spec["storage"]["volumeClaimTemplate"]
        yield (template.get("spec") or {}).get("storageClassName"), \
            "spec.storage.volumeClaimTemplate.spec.storageClassName"
    elif group == "postgresql.cnpg.io" and kind == "Cluster":
        # CloudNativePG makes each instance's claims from spec.storage (and spec.walStorage), class storageClass.
        for key in ("storage", "walStorage"):
            if spec.get(key):
                yield spec[key].get("storageClass"), f"spec.{key}.storageClass"


PROMETHEUS_OPERATOR_PODS = frozenset({"Prometheus", "Alertmanager"})
"""monitoring.coreos.com kinds whose pods the operator builds from the spec: its pod fields (volumes, containers,
serviceAccountName, priorityClassName, imagePullSecrets) and spec.secrets and spec.configMaps, mounted by name."""


def _refs(kind: str, holder: dict[str, Any] | None, key: str, where: str) -> Iterator[tuple[str, str, str]]:
    if holder and not holder.get("optional") and holder.get(key):
        yield kind, str(holder[key]), where


def uses(obj: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(kind, name, where) of every object the pods of `obj` need, in its namespace (PriorityClasses cluster-wide)."""
    spec = obj.get("spec") or {}
    pods = list(pod_specs(obj))
    if obj.get("kind") in PROMETHEUS_OPERATOR_PODS and str(obj.get("apiVersion", "")).startswith(
            "monitoring.coreos.com/"):
        yield from (("Secret", name, "spec.secrets") for name in spec.get("secrets") or [])
        yield from (("ConfigMap", name, "spec.configMaps") for name in spec.get("configMaps") or [])
        pods.append(spec)
    if obj.get("kind") == "Cluster" and str(obj.get("apiVersion", "")).startswith("postgresql.cnpg.io/"):
        yield from _refs("PriorityClass", spec, "priorityClassName", "spec.priorityClassName")
    for pod in pods:
        yield "ServiceAccount", str(pod.get("serviceAccountName") or pod.get("serviceAccount") or "default"), \
            "serviceAccountName"
        yield from _refs("PriorityClass", pod, "priorityClassName", "priorityClassName")
        yield from (("Secret", str(s["name"]), "imagePullSecrets") for s in pod.get("imagePullSecrets") or [])
        for volume in pod.get("volumes") or []:
            where = f"volume {volume.get('name')}"
            yield from _refs("Secret", volume.get("secret"), "secretName", where)
            yield from _refs("ConfigMap", volume.get("configMap"), "name", where)
            yield from _refs("PersistentVolumeClaim", volume.get("persistentVolumeClaim"), "claimName", where)
            for source in (volume.get("projected") or {}).get("sources") or []:
                yield from _refs("Secret", source.get("secret"), "name", where)
                yield from _refs("ConfigMap", source.get("configMap"), "name", where)
        for container in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
            where = f"container {container.get('name')}"
            for env in container.get("env") or []:
                source = env.get("valueFrom") or {}
                yield from _refs("Secret", source.get("secretKeyRef"), "name", f"{where} env {env.get('name')}")
                yield from _refs("ConfigMap", source.get("configMapKeyRef"), "name", f"{where} env {env.get('name')}")
            for env_from in container.get("envFrom") or []:
                yield from _refs("Secret", env_from.get("secretRef"), "name", f"{where} envFrom")
                yield from _refs("ConfigMap", env_from.get("configMapRef"), "name", f"{where} envFrom")


def node_label_keys(obj: dict[str, Any]) -> set[str]:
    """The node labels a pod of the object must find on its node: nodeSelector and required node affinity."""
    keys: set[str] = set()
    for pod in pod_specs(obj):
        keys |= set(pod.get("nodeSelector") or {})
        required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution") or {}
        for term in required.get("nodeSelectorTerms") or []:
            keys |= {e.get("key", "") for e in term.get("matchExpressions") or []
                     if e.get("operator") != "DoesNotExist"}
    return keys


def made_secrets(obj: dict[str, Any]) -> Iterator[str]:
    """Secrets (in the object's namespace) that a program the object runs, or the operator it asks, creates."""
    if obj.get("kind") == "Secret":
        yield (obj.get("metadata") or {}).get("name", "")
    if _group(obj) == "postgresql.cnpg.io" and obj.get("kind") == "Cluster":
        # CloudNativePG creates the application user's Secret `<cluster>-app` (docs: "Connecting from an application").
        yield f"{(obj.get('metadata') or {}).get('name')}-app"
    for pod in pod_specs(obj):
        for container in pod.get("containers") or []:
            for arg in [*(container.get("command") or []), *(container.get("args") or [])]:
                for flag in SECRET_NAME_FLAGS:
                    if isinstance(arg, str) and arg.startswith(flag):
                        yield arg.removeprefix(flag)


def _group(obj: dict[str, Any]) -> str:
    api_version = str(obj.get("apiVersion", ""))
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def _window(probe: dict[str, Any]) -> int:
    given = {**PROBE_DEFAULTS, **{k: v for k, v in probe.items() if k in PROBE_DEFAULTS}}
    return int(given["initialDelaySeconds"] + given["failureThreshold"] * given["periodSeconds"])


def startup_budget_s(obj: dict[str, Any]) -> tuple[int, str]:
    """The longest a workload's pods may take to become ready that their own probes allow, and how: a container's
    startup probe window (initial delay + failures x period; the kubelet restarts it after that), else its readiness
    probe's. Containers start together, so the pod's is the longest."""
    best, how = 0, ""
    for pod in pod_specs(obj):
        for container in pod.get("containers") or []:
            for key in ("startupProbe", "readinessProbe"):
                probe = container.get(key)
                if probe is not None:
                    window = _window(probe)
                    if window > best:
                        given = {**PROBE_DEFAULTS, **probe}
                        best, how = window, (f"container {container.get('name')} {key} {given['initialDelaySeconds']}"
                                             f" + {given['failureThreshold']} x {given['periodSeconds']} s")
                    break
    return best, how


def first_install_converges(deployed: Deployed) -> list[str]:
    """On an empty cluster, each consumer's namespace, StorageClass and CRD, and each Secret and ConfigMap its pods
    use that the stack makes, comes from a resource it waits for (or from itself), and each waiting release waits at
    least as long as its workloads' probes allow them to start, and for every node patch that sets a label its
    workloads' pods need on their node. Not judged: that what a StorageClass names is ready to provision (Ceph's
    cluster and filesystem healthy) before a claim's consumer stops waiting."""
    if not deployed.installs:
        return ["no dependency graph was given with the rendered objects: convergence cannot be judged"]
    node_labels: dict[str, list[str]] = {}
    namespaces: dict[str, list[str]] = {}
    classes: dict[str, list[str]] = {}
    crds: dict[tuple[str, str], list[str]] = {}
    made: dict[tuple[str, str, str], list[str]] = {}
    """(kind, namespace, name) of each Secret and ConfigMap the stack makes -> the resources that make it."""
    for install in deployed.installs:
        for obj in install.objects:
            metadata = obj.get("metadata") or {}
            if obj.get("kind") == "Namespace":
                namespaces.setdefault(metadata.get("name", ""), []).append(install.urn)
            if obj.get("kind") == "Node":
                for key in metadata.get("labels") or {}:
                    node_labels.setdefault(key, []).append(install.urn)
            if obj.get("kind") == "StorageClass":
                classes.setdefault(metadata.get("name", ""), []).append(install.urn)
            if obj.get("kind") == "CustomResourceDefinition":
                spec = obj.get("spec") or {}
                crds.setdefault((spec.get("group", ""), (spec.get("names") or {}).get("kind", "")), []).append(
                    install.urn)
            if obj.get("kind") == "ConfigMap":
                made.setdefault(("ConfigMap", metadata.get("namespace", ""), metadata.get("name", "")), []).append(
                    install.urn)
            for secret in made_secrets(obj):
                made.setdefault(("Secret", metadata.get("namespace", ""), secret), []).append(install.urn)

    def reaches(install: Install, makers: list[str]) -> bool:
        return any(m == install.urn or m in install.waits_for for m in makers)

    problems = []
    for install in deployed.installs:
        for obj in install.objects:
            consumer = f"{_named(obj)} (from {_short(install.urn)})"
            namespace = (obj.get("metadata") or {}).get("namespace", "")
            if namespace and namespace not in KUBERNETES_NAMESPACES:
                if namespace not in namespaces:
                    problems.append(f"{consumer}: no resource of the stack creates Namespace {namespace}")
                elif not reaches(install, namespaces[namespace]):
                    problems.append(f"{consumer}: Namespace {namespace} comes from "
                                    f"{', '.join(map(_short, namespaces[namespace]))}, which it does not wait for")
            for storage_class, where in claimed_classes(obj):
                if not storage_class:
                    problems.append(f"{consumer} {where}: no StorageClass named, and the stack marks none default")
                elif storage_class not in classes:
                    problems.append(f"{consumer} {where}: no resource of the stack creates StorageClass "
                                    f"{storage_class}")
                elif not reaches(install, classes[storage_class]):
                    problems.append(f"{consumer} {where}: StorageClass {storage_class} comes from "
                                    f"{', '.join(map(_short, classes[storage_class]))}, which it does not wait for")
            group = _group(obj)
            if group not in BUILTIN_GROUPS:
                makers = crds.get((group, str(obj.get("kind"))), [])
                if not makers:
                    problems.append(f"{consumer}: no resource of the stack installs the CRD of {group} "
                                    f"{obj.get('kind')}")
                elif not reaches(install, makers):
                    problems.append(f"{consumer}: the CRD of {group} {obj.get('kind')} comes from "
                                    f"{', '.join(map(_short, makers))}, which it does not wait for")
            for kind, name, where in uses(obj):
                makers = made.get((kind, namespace, name), [])
                # One nothing in the stack makes is the site's to create before `pulumi up`, or the cluster's
                # (kube-root-ca.crt): references-resolve judges that it is listed or built in.
                if makers and not reaches(install, makers):
                    problems.append(f"{consumer} {where}: {kind} {namespace}/{name} comes from "
                                    f"{', '.join(map(_short, makers))}, which it does not wait for")
        if install.wait_s is not None:
            for obj in install.objects:
                if obj.get("kind") in WAITED_KINDS:
                    budget, how = startup_budget_s(obj)
                    if budget > install.wait_s:
                        problems.append(f"{_short(install.urn)} waits {install.wait_s} s for its workloads, but "
                                        f"{_named(obj)} may take {budget} s to start ({how})")
                    keys = sorted(node_labels.keys() & node_label_keys(obj))
                    patches = {u for key in keys for u in node_labels[key]}
                    early = sorted((u for u in patches if u not in install.waits_for), key=_short)
                    if early:
                        named = ", ".join(map(_short, early[:3])) + (", ..." if len(early) > 3 else "")
                        problems.append(f"{_short(install.urn)} waits for {_named(obj)}, whose pods need nodes "
                                        f"labelled {', '.join(keys)}, before {len(early)} of the {len(patches)} node "
                                        f"patches that set them ({named})")
    return problems
