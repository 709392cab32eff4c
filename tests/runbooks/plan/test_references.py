"""references-resolve's rules, one object at a time (tests/runbooks/plan/test_helm.py judges the rendered prod stack
and breaks it): what counts as an in-cluster address and which port it names, the Services operators make, and the
objects a pod uses."""

import base64
from typing import Any

import pytest

from components.supplied import Supplied
from runbooks.plan.producers import Deployed
from runbooks.plan.references import references_resolve


def service(name: str, namespace: str, *ports: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"port": p} for p in ports]}}


def config(text: str, namespace: str = "apps") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": namespace},
            "data": {"app.yaml": text}}


def pod(namespace: str = "apps", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app", "namespace": namespace},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:1"}], **spec}}}}


def judged(*objects: dict[str, Any], supplied: tuple[Supplied, ...] = ()) -> list[str]:
    return references_resolve(Deployed(list(objects), [], {}, supplied=supplied))


@pytest.mark.parametrize(("objects", "violations"), [
    pytest.param([service("api", "apps", 80), config("url: http://api.apps.svc/v1")], [],
                 id="should take a URL's port from its scheme"),
    pytest.param([service("api", "apps", 8080), config("url: https://api.apps.svc/v1")],
                 ["ConfigMap apps/cfg data.app.yaml: api.apps.svc names port 443, which Service apps/api does not "
                  "have (it has 8080)"], id="should hold a URL whose scheme's port the Service lacks"),
    pytest.param([service("api", "apps", 8080), config("host: api.apps.svc.cluster.local")], [],
                 id="should accept a bare host naming the Service on any port"),
    pytest.param([config("url: http://api.other.svc:80")],
                 ["ConfigMap apps/cfg data.app.yaml: api.other.svc:80 names no Service api in namespace other that "
                  "the stack deploys"], id="should hold an address in a namespace without that Service"),
    pytest.param([config("url: https://api.apps.svc.example.com/v1")], [],
                 id="should not take a public name under svc for an in-cluster one"),
    pytest.param([{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "metadata": {"name": "db",
                                                                                          "namespace": "apps"}},
                  config("dsn: postgresql://app@db-rw.apps.svc.cluster.local:5432/app")], [],
                 id="should accept the Services CloudNativePG makes for a Cluster"),
    pytest.param([{"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
                   "metadata": {"name": "k8s", "namespace": "mon"}, "spec": {"serviceAccountName": "default"}},
                  config("address: http://prometheus-operated.mon.svc:9090")], [],
                 id="should accept the Service the Prometheus operator makes"),
    pytest.param([{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "apps"},
                   "data": {"k": base64.b64encode(b"url: http://gone.apps.svc:9/").decode()}}],
                 ["Secret apps/s data.k: gone.apps.svc:9 names no Service gone in namespace apps that the stack "
                  "deploys"], id="should read a Secret's data decoded"),
])
def test_should_judge_every_in_cluster_address(objects: list[dict[str, Any]], violations: list[str]) -> None:
    assert judged(*objects) == violations


UNSUPPLIED = "is rendered, registered or made by nothing the stack deploys, and no operator is told to supply it " \
             "(components/supplied.py)"


@pytest.mark.parametrize(("objects", "violations"), [
    pytest.param([pod(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])],
                 [f"Deployment apps/app volume data: PersistentVolumeClaim apps/data {UNSUPPLIED}"],
                 id="should hold a claim nothing makes"),
    pytest.param([pod(priorityClassName="urgent")], [f"Deployment apps/app priorityClassName: PriorityClass urgent "
                                                     f"{UNSUPPLIED}"], id="should hold a PriorityClass nothing makes"),
    pytest.param([pod(serviceAccountName="runner")], [f"Deployment apps/app serviceAccountName: ServiceAccount "
                                                      f"apps/runner {UNSUPPLIED}"],
                 id="should hold a ServiceAccount nothing makes"),
    pytest.param([pod(priorityClassName="system-node-critical",
                      volumes=[{"name": "ca", "configMap": {"name": "kube-root-ca.crt"}},
                               {"name": "opt", "secret": {"secretName": "maybe", "optional": True}}])], [],
                 id="should accept the default ServiceAccount, built-in objects and an optional Secret"),
    pytest.param([pod(volumes=[{"name": "keys", "secret": {"secretName": "keys"}}])],
                 [f"Deployment apps/app volume keys: Secret apps/keys {UNSUPPLIED}"],
                 id="should hold a Secret nobody makes or supplies"),
])
def test_should_judge_every_object_a_pod_uses(objects: list[dict[str, Any]], violations: list[str]) -> None:
    assert judged(*objects) == violations


def test_should_accept_a_secret_the_operators_supply() -> None:
    deployment = pod(volumes=[{"name": "keys", "secret": {"secretName": "keys"}}])
    assert judged(deployment, supplied=(Supplied("Secret", "apps", "keys", "API keys"),)) == []
