"""The lending and health controllers' kubeconfig identities, as the stack's RBAC allows them: every kubectl call the
controllers make, collected by the fakes their tests use (tests/harness/kubectl.py, tests/harness/health_world.py),
must be allowed to the spec's user by the Roles and bindings `gpuctl plan --out` wrote (kubernetes/*.yaml); a call
the roles do not allow fails, whichever controller makes it."""

import ast
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.scheduling.controller_access import replica_floor_access
from components.scheduling.lending_decision import borrowers
from components.site.site import Site
from runbooks.acceptance.alerts import sop_missing
from runbooks.flex.lending import Flex, flex_nodes
from runbooks.health.nodes import Nodes
from tests.builders import REPO, parse, prod_values
from tests.harness.health_world import FakeKube
from tests.harness.kube_api import recording_api
from tests.harness.kubectl import FakeKubectl
from tests.harness.kubectl_access import Access, Request, requests
from tests.harness.slurm_cluster import plan

SITE = parse(prod_values())
CONTROLLERS = ("runbooks/flex", "runbooks/health")


@pytest.fixture(scope="module")
def access(tmp_path_factory: pytest.TempPathFactory) -> Access:
    out = plan(prod_values(), tmp_path_factory.mktemp("plan") / "out")
    return Access.of(yaml.safe_load(path.read_text()) for path in sorted((out / "kubernetes").glob("*.yaml")))


def idle_slurm(args: Sequence[str], timeout_s: float = 30) -> str:
    """Slurm with every node idle and drained for nothing: lend and reclaim go through to kubectl."""
    return f"NodeName={args[-1]} State=IDLE" if args[:2] == ["scontrol", "--oneliner"] else ""


def flex_calls(site: Site) -> list[list[str]]:
    """The lending controller's kubectl calls through each of its moves: lend, the replica floor, reclaim (whose
    drain the cluster refuses once, then allows), status."""
    kubectl = FakeKubectl()
    flex = Flex(site, idle_slurm, kubectl, progress=lambda line: None, sleep=lambda s: None)
    flex.lend([], wait_s=1, poll_s=0.1)
    for borrower in borrowers(site):
        flex.set_replica_floor(borrower.name, borrower.min_replicas)
    kubectl.pdb_blocks = True
    flex.reclaim(flex_nodes(site)[:1], wait_s=1)
    kubectl.pdb_blocks = False
    flex.reclaim([], wait_s=1)
    flex.status()
    return kubectl.calls


def health_calls(site: Site) -> list[list[str]]:
    """The health controller's: its read, a drain (cordon, mark) and a give-back (uncordon, unmark) of a node."""
    node = site.node_groups[0].nodes[0].name
    kube = FakeKube([n.name for g in site.node_groups for n in g.nodes])
    nodes = Nodes(site, idle_slurm, kube, progress=lambda line: None)
    nodes.read()
    nodes.drain(node, "xid 79", in_slurm=False, in_kube=True)
    nodes.give_back(node, "", in_kube=True)
    return kube.calls


def call_sites() -> list[tuple[str, ...]]:
    """Each kubectl call in the controllers' code, as the literal words it starts with (`kubectl drain`, `kubectl
    get nodes --output json`)."""
    sites = []
    for path in sorted(p for d in CONTROLLERS for p in (REPO / d).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.List)
                and node.elts
                and isinstance(node.elts[0], ast.Constant)
                and node.elts[0].value == "kubectl"
            ):
                words = []
                for element in node.elts:
                    if not (isinstance(element, ast.Constant) and isinstance(element.value, str)):
                        break
                    words.append(element.value)
                sites.append(tuple(words))
    return sites


def made(calls: list[list[str]], site: tuple[str, ...]) -> bool:
    """Whether a call starts as the call site does, its later literal words in order."""
    return any(call[:2] == list(site[:2]) and all(word in call[2:] for word in site[2:]) for call in calls)


def test_should_allow_every_kubectl_call_the_controllers_make_and_no_other_user(access: Access) -> None:
    flex, health = flex_calls(SITE), health_calls(SITE)
    # Every call site in the controllers' code was made, so none goes unjudged.
    assert [site for site in call_sites() if not made(flex + health, site)] == []
    assert access.refused(SITE.lending.kubernetes_user, flex) == []
    assert access.refused(SITE.health.kubernetes_user, health) == []
    # Each identity holds its own controller's rights only: the health controller may not drain nor set a floor.
    assert {call for call, _ in access.refused(SITE.health.kubernetes_user, flex)} >= {
        f"kubectl drain {flex_nodes(SITE)[0]} --ignore-daemonsets --delete-emptydir-data --timeout=1s",
        f"kubectl patch scaledobject vllm-{borrowers(SITE)[0].name}-scaledobject --namespace inference --type merge "
        '--patch {"spec": {"minReplicaCount": ' + f"{borrowers(SITE)[0].min_replicas}}}}}",
    }
    assert access.refused("someone-else", health) != []


@pytest.mark.parametrize(
    ("call", "why"),
    [
        pytest.param(
            ["kubectl", "uncordon", "gpu-a800-01"],
            "a node outside the flex pool",
            id="should refuse the lending controller a node Slurm keeps",
        ),
        pytest.param(
            ["kubectl", "patch", "scaledobject", "vllm-qwen2-5-72b-scaledobject", "--namespace", "default"],
            "another namespace",
            id="should refuse the replica floor outside the inference namespace",
        ),
        pytest.param(
            ["kubectl", "patch", "scaledobject", "other-scaledobject", "--namespace", "inference"],
            "a ScaledObject of no lent model",
            id="should refuse an autoscaler of a model not lent",
        ),
        pytest.param(
            ["kubectl", "delete", "node", "gpu-a800-09"],
            "a verb no controller uses",
            id="should refuse to judge a kubectl verb whose requests are not known",
        ),
    ],
)
def test_should_refuse_the_lending_controller_what_its_calls_do_not_need(
    access: Access, call: list[str], why: str
) -> None:
    if call[1] == "delete":
        with pytest.raises(ValueError, match="^kubectl delete: its API requests are not known here"):
            requests(call)
    else:
        assert access.refused(SITE.lending.kubernetes_user, [call]) != [], why


def test_should_fail_a_controller_call_the_rendered_role_does_not_allow(access: Access) -> None:
    # The plan's flex ClusterRole without the eviction rule: the reclaim's drain is refused, and only that.
    def without_eviction(manifest: Any) -> Any:
        if manifest["kind"] != "ClusterRole":
            return manifest
        return {**manifest, "rules": [r for r in manifest["rules"] if r["resources"] != ["pods/eviction"]]}

    narrower = Access(tuple(without_eviction(m) for m in access.objects))
    refused = narrower.refused(SITE.lending.kubernetes_user, flex_calls(SITE))
    assert refused and {r for _, r in refused} == {Request("create", "", "pods/eviction", None, None)}
    assert {call.split()[1] for call, _ in refused} == {"drain"}
    # No lent model, no replica floor Role: RBAC reads an empty resourceNames as every name.
    assert replica_floor_access(SITE, []) == []
    assert replica_floor_access(SITE, ["a"])[0]["rules"][0]["resourceNames"] == ["a"]


def test_should_bind_the_users_the_spec_names(tmp_path: Path) -> None:
    values = prod_values()
    values["lending"]["kubernetes_user"] = "flex.example.org"
    values["health"] = {**values.get("health", {}), "kubernetes_user": "health.example.org"}
    site = parse(values)
    out = plan(values, tmp_path / "out")
    access = Access.of(yaml.safe_load(p.read_text()) for p in (out / "kubernetes").glob("*.yaml"))
    assert access.refused("flex.example.org", flex_calls(site)) == []
    assert access.refused("health.example.org", health_calls(site)) == []
    assert access.refused(SITE.lending.kubernetes_user, flex_calls(site)) != []


def covers(mapped: Request, sent: Request) -> bool:
    """Whether a request the mapping names holds one kubectl sent (no namespace or name: any)."""
    return (mapped.verb, mapped.group, mapped.resource) == (sent.verb, sent.group, sent.resource) and all(
        want is None or want == got for want, got in ((mapped.namespace, sent.namespace), (mapped.name, sent.name))
    )


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl on PATH")
def test_should_name_every_request_kubectl_sends_for_the_controllers_calls(tmp_path: Path) -> None:
    calls = {tuple(call): call for call in [*flex_calls(SITE), *health_calls(SITE)]}
    with recording_api(tmp_path) as sent:
        unnamed = {
            " ".join(call): [r for r in sent(call) if not any(covers(m, r) for m in requests(call))]
            for call in calls.values()
        }
    assert {call: missing for call, missing in unnamed.items() if missing} == {}
    assert len(unnamed) >= 9, sorted(unnamed)  # label, unlabel, uncordon, drain, patch, two gets, cordon, annotate


def test_should_fail_a_mapping_that_misses_a_request_kubectl_sends(tmp_path: Path) -> None:
    # `kubectl patch` reads the object first: a mapping naming the PATCH alone misses the GET.
    call = [
        "kubectl",
        "patch",
        "scaledobject",
        "vllm-m-scaledobject",
        "--namespace",
        "inference",
        "--type",
        "merge",
        "--patch",
        "{}",
    ]
    if shutil.which("kubectl") is None:
        pytest.skip("needs kubectl on PATH")
    with recording_api(tmp_path) as sent:
        missed = [
            r
            for r in sent(call)
            if not covers(Request("patch", "keda.sh", "scaledobjects", "inference", "vllm-m-scaledobject"), r)
        ]
    assert missed == [Request("get", "keda.sh", "scaledobjects", "inference", "vllm-m-scaledobject")]


@pytest.mark.parametrize(
    ("section", "sop"),
    [("lending", "lending-controller-down"), ("health", "health-controller-down")],
    ids=["lending controller", "health controller"],
)
def test_should_tell_on_call_that_forbidden_means_a_kubeconfig_user_the_rbac_does_not_bind(
    access: Access, section: str, sop: str
) -> None:
    # A Forbidden from kubectl reads like a broken cluster; the SOP's first checks must say it is the identity.
    text = (REPO / "docs" / "sop" / f"{sop}.md").read_text()
    assert sop_missing(sop, REPO / "docs" / "sop") is None
    immediate = text.split("## Immediate action", 1)[1].split("\n## ", 1)[0]
    assert "Forbidden" in immediate and f"{section}.kubernetes_user" in immediate
    user = getattr(SITE, section).kubernetes_user
    bound = {b["roleRef"]["name"] for b in access.objects if b["kind"].endswith("Binding")
             and any(s.get("name") == user for s in b.get("subjects", []))}
    named = set(re.findall(r"the (?:Cluster)?Role\s+`([^`]+)`", immediate))
    assert named and named == bound, f"{sop}.md names the roles {sorted(named)}; the plan binds {sorted(bound)}"
