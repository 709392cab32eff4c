"""The Kubernetes objects the SOPs' kubectl commands name, and whether a rendered stack has them.

An SOP is read in an incident: a command naming an object the stack does not create fails when it is needed most.
Every inline `kubectl ...` span of docs/sop/*.md is read for its namespace (`-n`, `--namespace`) and its object
references (`<kind>/<name>`, `--from=<kind>/<name>`, and `get|describe <kind> <name>`). A placeholder bound to the
site (`<model>`, `<Hostname>`) stands for each of its values, and each must name an object; any other placeholder
(`<latest checkpoint-mover job>`) stands for any name, and some object must match it.
"""

import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = {
    **dict.fromkeys(("deploy", "deployment", "deployments"), "Deployment"),
    **dict.fromkeys(("sts", "statefulset", "statefulsets"), "StatefulSet"),
    **dict.fromkeys(("ds", "daemonset", "daemonsets"), "DaemonSet"),
    **dict.fromkeys(("job", "jobs"), "Job"),
    **dict.fromkeys(("cj", "cronjob", "cronjobs"), "CronJob"),
    **dict.fromkeys(("svc", "service", "services"), "Service"),
    **dict.fromkeys(("ep", "endpoints"), "Endpoints"),
    **dict.fromkeys(("cm", "configmap", "configmaps"), "ConfigMap"),
    **dict.fromkeys(("secret", "secrets"), "Secret"),
    **dict.fromkeys(("cephcluster", "cephclusters"), "CephCluster"),
    **dict.fromkeys(("no", "node", "nodes"), "Node"),
}
"""kubectl's names and short names of the kinds the SOPs may name."""
NAMING_VERBS = ("get", "describe", "delete", "edit", "cordon", "uncordon", "drain")
"""Verbs whose `<kind> <name>` (or, for the node verbs, `<name>`) names an object."""
NODE_VERBS = ("cordon", "uncordon", "drain")
PLACEHOLDER = re.compile(r"<[^<>]+>")
NAME_PART = "[a-z0-9][a-z0-9.-]*"


@dataclass(frozen=True)
class Reference:
    where: str
    """SOP file and the command, for the message."""
    namespace: str | None
    """None: cluster-scoped, or every namespace (-A)."""
    kind: str
    name: str
    """With its placeholders, as the SOP writes it."""


def commands(sop_dir: Path) -> Iterator[tuple[str, str]]:
    """(file name, command) of every inline code span that runs kubectl."""
    for path in sorted(sop_dir.glob("*.md")):
        for span in re.findall(r"`([^`]+)`", path.read_text()):
            if span.startswith("kubectl "):
                yield path.name, span


def references(file: str, command: str) -> list[Reference]:
    """The objects one kubectl command names. Placeholders are kept whole (they may hold spaces)."""
    kept: list[str] = []

    def hide(match: re.Match[str]) -> str:
        kept.append(match.group(0))
        return f"@{len(kept) - 1}@"

    tokens = [re.sub(r"@(\d+)@", lambda m: kept[int(m.group(1))], t)
              for t in shlex.split(PLACEHOLDER.sub(hide, command.split(" -- ")[0]))]
    namespace: str | None = "default"
    words: list[str] = []
    index = 1
    while index < len(tokens):
        token = tokens[index]
        if token in ("-n", "--namespace"):
            namespace, index = tokens[index + 1], index + 2
            continue
        if token.startswith("--namespace="):
            namespace = token.split("=", 1)[1]
        elif token in ("-A", "--all-namespaces"):
            namespace = None
        elif token.startswith("--from="):
            words.append(token.split("=", 1)[1])
        elif not token.startswith("-"):
            words.append(token)
        index += 1
    where = f"{file}: `{command}`"
    found = []
    for word in words:
        kind, _, name = word.partition("/")
        if name and kind in KINDS:
            found.append(Reference(where, namespace, KINDS[kind], name))
    verb = words[0] if words else ""
    if verb in NODE_VERBS and len(words) > 1:
        found.append(Reference(where, None, "Node", words[1]))
    elif verb in NAMING_VERBS and len(words) > 2 and words[1] in KINDS:
        found.append(Reference(where, namespace, KINDS[words[1]], words[2]))
    # Nodes belong to no namespace, whatever -n says.
    return [Reference(r.where, None, r.kind, r.name) if r.kind == "Node" else r for r in found]


def namespaces_of(command: str) -> list[str]:
    """The namespaces a command passes with -n or --namespace."""
    tokens = shlex.split(PLACEHOLDER.sub("x", command.split(" -- ")[0]))
    return [tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t in ("-n", "--namespace")] + \
        [t.split("=", 1)[1] for t in tokens if t.startswith("--namespace=")]


def _names(reference: Reference, bound: Mapping[str, Sequence[str]]) -> list[re.Pattern[str]]:
    """One pattern per value of the bound placeholders in the name (one pattern when there are none)."""
    patterns = [""]
    for part in re.split(f"({PLACEHOLDER.pattern})", reference.name):
        if part in bound:
            patterns = [p + re.escape(value) for p in patterns for value in bound[part]]
        elif PLACEHOLDER.fullmatch(part):
            patterns = [p + NAME_PART for p in patterns]
        else:
            patterns = [p + re.escape(part) for p in patterns]
    return [re.compile(p) for p in patterns]


def unresolved(refs: Sequence[Reference], objects: Sequence[dict[str, Any]],
               bound: Mapping[str, Sequence[str]], nodes: Sequence[str]) -> list[str]:
    """Each reference some value of which names no object of the render. An Endpoints object is its Service's
    (Kubernetes names it after the Service); a Job may be one a CronJob of the namespace starts (`<cronjob>-<n>`);
    a Node is one of the site's."""
    def present(kind: str, namespace: str | None, name: re.Pattern[str]) -> bool:
        if kind == "Node":
            return any(name.fullmatch(n) for n in nodes)
        kinds = {"Endpoints": ("Service",), "Job": ("Job", "CronJob")}.get(kind, (kind,))
        for obj in objects:
            metadata = obj.get("metadata") or {}
            if obj.get("kind") not in kinds or namespace not in (None, metadata.get("namespace")):
                continue
            candidate = str(metadata.get("name"))
            # The CronJob controller names each Job after its CronJob and the scheduled time in minutes.
            if name.fullmatch(f"{candidate}-29412345" if obj["kind"] == "CronJob" != kind else candidate):
                return True
        return False

    return [f"{r.where}: no {r.kind} {r.name} in namespace {r.namespace}" if r.namespace else
            f"{r.where}: no {r.kind} {r.name}"
            for r in refs if not all(present(r.kind, r.namespace, p) for p in _names(r, bound))]
