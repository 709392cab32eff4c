"""Pinned charts and rendered manifests become Kubernetes resources here: every Helm release goes through
`release`, every custom resource's arguments through `custom`."""

from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from components.charts import Chart


def release(name: str, chart: Chart, namespace: str, values: dict[str, Any], parent: pulumi.Resource,
            after: list[pulumi.Resource], release_name: str | None = None) -> kubernetes.helm.v3.Release:
    return kubernetes.helm.v3.Release(
        name,
        name=release_name or chart.name,
        chart=chart.name,
        version=chart.version,
        repository_opts=kubernetes.helm.v3.RepositoryOptsArgs(repo=chart.repo) if chart.repo else None,
        namespace=namespace,
        values=values,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=after),
    )


def custom(manifest: dict[str, Any]) -> dict[str, Any]:
    """A custom resource's manifest as CustomResource arguments."""
    return {"api_version": manifest["apiVersion"], "kind": manifest["kind"], "metadata": manifest["metadata"],
            "spec": manifest["spec"]}
