"""Pinned charts and rendered manifests become Kubernetes resources here, one way each: every Helm release goes
through `release`, every rendered manifest through `fields` (a typed resource) or `custom` (a custom resource)."""

import re
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from components.charts import Chart
from components.mirror.charts import chart_reference, image_values, merged
from components.site.mirror import Mirror


def release(name: str, chart: Chart, namespace: str, values: dict[str, Any], parent: pulumi.Resource,
            after: list[pulumi.Resource], *, mirror: Mirror, release_name: str | None = None,
            timeout_s: int | None = None, aliases: list[pulumi.Alias] | None = None) -> kubernetes.helm.v3.Release:
    """mirror: the site's (site.mirror): the chart and the images it names by default come from there when set;
    timeout_s: how long the release waits for its workloads to be ready (pulumi-kubernetes' Release `timeout`,
    300 s when unset); aliases: the URNs the release had before it moved."""
    reference, repo = chart_reference(chart, mirror)
    return kubernetes.helm.v3.Release(
        name,
        name=release_name or chart.name,
        chart=reference,
        version=chart.version,
        repository_opts=kubernetes.helm.v3.RepositoryOptsArgs(repo=repo) if repo else None,
        namespace=namespace,
        values=merged(values, image_values(chart, mirror)),
        timeout=timeout_s,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=after, aliases=aliases),
    )


def fields(manifest: dict[str, Any]) -> dict[str, Any]:
    """A manifest as a typed resource's keyword arguments: the provider's snake_case names, without apiVersion
    and kind, which the resource's class states."""
    return {re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower(): value for key, value in manifest.items()
            if key not in ("apiVersion", "kind")}


def rbac(name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """An RBAC manifest (a Role, a ClusterRole or a binding) as its typed resource."""
    kind: type[pulumi.CustomResource] = getattr(kubernetes.rbac.v1, manifest["kind"])
    return kind(name, **fields(manifest), opts=opts)


def custom(manifest: dict[str, Any]) -> dict[str, Any]:
    """A custom resource's manifest as CustomResource arguments: its apiVersion and kind are its own."""
    return {"api_version": manifest["apiVersion"], "kind": manifest["kind"], **fields(manifest)}
