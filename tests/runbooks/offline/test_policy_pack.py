"""The policy pack through its real gRPC entry point, on the prod graph and on graphs edited to break a rule."""

import copy
import gc
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from pulumi.output import UNKNOWN

from runbooks.offline import policy_pack
from runbooks.offline.engine import Resource, ResourceGraph, run_program
from runbooks.offline.policy_pack import (
    POLICY_DIR,
    Finding,
    PolicyConfigError,
    PolicyPack,
    PolicyPackError,
    PolicyResult,
    check_policies,
)
from tests.builders import REPO, prod_config_at

RACK_A01 = "urn:pulumi:prod::gpu-cluster::gpucluster:cluster:GpuCluster$gpucluster:facility:Facility" \
           "$gpucluster:facility:Rack::a01"
MONITORING_STACK_TYPE = "gpucluster:monitoring:Stack"
WATCHED_FIRST = ["monitoring-stack-present", "dcgm-exporter-enabled", "metrics-hot-retention", "metrics-cold-tier",
                 "gpu-idle-alert", "gpu-temperature-alert", "critical-alerts-routed", "llm-cost-dashboard",
                 "serving-after-monitoring"]
COOLING = ["gpu-node-in-rack", "rack-heat-within-cooling", "rack-load-within-power", "rack-dual-feeds",
           "dense-gpus-in-dense-racks"]


@pytest.fixture(scope="module")
def prod() -> ResourceGraph:
    return run_program(REPO, "prod")


@pytest.fixture(scope="module")
def prod_results(prod: ResourceGraph) -> dict[str, PolicyResult]:
    return by_name(check_policies(prod))


def by_name(results: list[PolicyResult]) -> dict[str, PolicyResult]:
    return {r.name: r for r in results}


def edited_rack(graph: ResourceGraph, **outputs: object) -> ResourceGraph:
    edited = copy.deepcopy(graph)
    edited.resources[RACK_A01].outputs.update(outputs)
    return edited


def test_should_pass_every_policy_on_prod(prod_results: dict[str, PolicyResult]) -> None:
    assert {name: r.violations for name, r in prod_results.items() if not r.passed} == {}
    # Judged, not skipped: only the remediation, which has no validation to run, is not applicable, and the team cap
    # at the first stage, which has no team to cap.
    assert {name: r.not_applicable for name, r in prod_results.items() if r.not_applicable} == {
        "secrets-stay-secret": ["Policy does not implement validate"],
        "team-gpus-capped": ["no team namespace in the stack"]}


def test_should_judge_with_a_pack_started_before_the_program_ran(prod: ResourceGraph,
                                                                 prod_results: dict[str, PolicyResult]) -> None:
    # `gpuctl plan` starts the pack first, so that it loads its modules while the program runs.
    with PolicyPack(POLICY_DIR, prod.project, prod.stack) as pack:
        assert by_name(check_policies(prod, pack=pack)) == prod_results


def test_should_judge_by_the_started_pack_not_a_new_one(prod: ResourceGraph, tmp_path: Path) -> None:
    (tmp_path / "__main__.py").write_text("raise SystemExit('broken pack')\n")
    with PolicyPack(tmp_path, prod.project, prod.stack) as broken, pytest.raises(PolicyPackError, match="broken pack"):
        check_policies(prod, policy_dir=POLICY_DIR, pack=broken)


def test_should_judge_and_pass_every_policy_once_teams_are_onboarded() -> None:
    results = by_name(check_policies(run_program(REPO, "prod", prod_config_at("canary"))))
    assert {name: r.violations for name, r in results.items() if not r.passed} == {}
    assert [name for name, r in results.items() if r.not_applicable] == ["secrets-stay-secret"]


def test_should_judge_and_pass_the_prod_monitoring_stack(prod_results: dict[str, PolicyResult]) -> None:
    assert {name: (r.passed, r.not_applicable) for name, r in prod_results.items() if name in WATCHED_FIRST} \
        == dict.fromkeys(WATCHED_FIRST, (True, []))


def test_should_judge_and_pass_every_prod_rack(prod_results: dict[str, PolicyResult]) -> None:
    assert {name: (r.passed, r.not_applicable, r.enforcement_level) for name, r in prod_results.items()
            if name in COOLING} == dict.fromkeys(COOLING, (True, [], "mandatory"))


def test_should_send_prod_secrets_as_secrets(prod_results: dict[str, PolicyResult]) -> None:
    # Every node check's connection (it holds the SSH key) is a secret, so the remediation has nothing to seal.
    assert prod_results["secrets-stay-secret"].remediated == []


def test_should_deny_an_a800_node_in_an_air_cooled_15_kw_rack(prod: ResourceGraph) -> None:
    graph = edited_rack(prod, power_budget_kw=15, cooling_type="air", cooling_capacity_kw=15, usable_kw=12)
    results = by_name(check_policies(graph))
    nodes = "(GPU nodes: gpu-a800-01, gpu-a800-02, gpu-a800-03, gpu-a800-04)"
    assert results["dense-gpus-in-dense-racks"].violations == [Finding(
        "Rack a01 holds dense GPUs on gpu-a800-01 (A800-SXM4-80GB), gpu-a800-02 (A800-SXM4-80GB), gpu-a800-03 "
        "(A800-SXM4-80GB), gpu-a800-04 (A800-SXM4-80GB) but its power budget is 15 kW (dense racks need >= 40 kW) "
        f"and it is air-cooled (dense racks need liquid or rear-door cooling) {nodes}", RACK_A01, "mandatory")]
    assert results["rack-heat-within-cooling"].violations == [Finding(
        f"Rack a01: heat load 25.957 kW exceeds cooling capacity 15 kW {nodes}", RACK_A01, "mandatory")]
    assert results["rack-load-within-power"].violations == [Finding(
        f"Rack a01: IT load 25.957 kW exceeds usable power 12 kW {nodes}", RACK_A01, "mandatory")]


def test_should_fail_closed_on_a_value_unknown_at_preview(prod: ResourceGraph) -> None:
    results = by_name(check_policies(edited_rack(prod, heat_load_kw=UNKNOWN)))
    assert [(v.message, v.enforcement_level) for v in results["rack-heat-within-cooling"].violations] == [
        ("Rack a01: heat_load_kw is unknown at preview; this policy fails closed "
         "(GPU nodes: gpu-a800-01, gpu-a800-02, gpu-a800-03, gpu-a800-04)", "mandatory")]


@pytest.mark.parametrize("config", [
    pytest.param({"storage-tiers-present": "advisory"}, id="should make a policy advisory by its name"),
    pytest.param({"storage-tiers-present": {"enforcementLevel": "advisory"}},
                 id="should make a policy advisory by an enforcementLevel entry"),
])
def test_should_turn_a_mandatory_violation_advisory_by_config(prod: ResourceGraph, config: dict[str, object]) -> None:
    without_storage = copy.deepcopy(prod)
    for urn in [r.urn for r in without_storage.resources.values() if r.type == "gpucluster:storage:Tiers"]:
        del without_storage.resources[urn]
    results = by_name(check_policies(without_storage, config))
    assert results["storage-tiers-present"].enforcement_level == "advisory"
    assert [v.enforcement_level for v in results["storage-tiers-present"].violations] == ["advisory"]
    assert {r.enforcement_level for n, r in results.items() if n in COOLING + WATCHED_FIRST} == {"mandatory"}


def test_should_set_every_level_with_all_and_let_a_policy_override_it(prod: ResourceGraph) -> None:
    results = by_name(check_policies(prod, {"all": "advisory", "rack-heat-within-cooling": "disabled"}))
    assert results["rack-heat-within-cooling"].enforcement_level == "disabled"
    assert {r.enforcement_level for n, r in results.items() if n != "rack-heat-within-cooling"} == {"advisory"}


def test_should_hand_policy_config_properties_to_the_pack(prod: ResourceGraph) -> None:
    (release,) = [r for r in prod.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] ==
                  "kube-prometheus-stack"]
    days = int(release.inputs["values"]["prometheus"]["prometheusSpec"]["retention"].removesuffix("d"))
    config = {"metrics-hot-retention": {"min_days": days + 1}}
    assert by_name(check_policies(prod, config))["metrics-hot-retention"].violations == [Finding(
        f"Release {release.name}: Prometheus keeps {days:g} days of metrics, under {days + 1:g}", release.urn,
        "mandatory")]


def test_should_seal_a_plaintext_key_sent_to_the_pack(prod: ResourceGraph) -> None:
    graph = copy.deepcopy(prod)
    check = next(r for r in graph.resources.values() if r.type == "command:remote:Command")
    leaked = Resource(check.urn + "-leaked", check.type, check.name + "-leaked", True, check.parent,
                      {**check.inputs, "connection": {"host": "10.0.0.1", "privateKey": "-----BEGIN"}})
    graph.resources[leaked.urn] = leaked
    assert by_name(check_policies(graph))["secrets-stay-secret"].remediated == [leaked.urn]


@pytest.mark.parametrize(("config", "message"), [
    pytest.param({"no-such-policy": "advisory"}, "policy config names policies the pack lacks: no-such-policy",
                 id="should reject config for a policy the pack lacks"),
    pytest.param({"all": "warn"}, "policy config all: enforcementLevel 'warn' is not one of",
                 id="should reject a bad level"),
])
def test_should_reject_bad_policy_config(prod: ResourceGraph, config: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyConfigError, match=message):
        check_policies(prod, config)


def test_should_report_a_pack_that_dies_before_it_serves_with_its_status_and_last_words(
        prod: ResourceGraph, tmp_path: Path) -> None:
    (tmp_path / "__main__.py").write_text("raise SystemExit('broken pack')\n")
    started = time.monotonic()
    with pytest.raises(PolicyPackError) as raised:
        check_policies(prod, policy_dir=tmp_path)
    assert time.monotonic() - started < 10
    assert str(raised.value).splitlines() == ["the policy pack exited with status 1 before it served", "  broken pack"]


def test_should_name_a_module_the_pack_cannot_import(prod: ResourceGraph, tmp_path: Path) -> None:
    shutil.copytree(REPO / "policy", tmp_path, dirs_exist_ok=True)
    common = tmp_path / "common.py"
    common.write_text("import gpucluster_not_installed\n" + common.read_text())
    with pytest.raises(PolicyPackError) as raised:
        check_policies(prod, policy_dir=tmp_path)
    first, *rest = str(raised.value).splitlines()
    assert first.startswith("the policy pack exited with status 1 before it served: module "
                            "'gpucluster_not_installed' is not installed in ")
    assert rest[-1] == "  ModuleNotFoundError: No module named 'gpucluster_not_installed'"


def test_should_exchange_with_the_pack_without_collection_and_collect_again_after(
        prod: ResourceGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    collecting: list[bool] = []
    collect = policy_pack._collect

    def noting(response: Any, results: dict[str, PolicyResult]) -> None:
        collecting.append(gc.isenabled())
        collect(response, results)

    monkeypatch.setattr(policy_pack, "_collect", noting)
    assert all(result.passed for result in check_policies(prod))
    assert collecting and not any(collecting)  # one per response: the requests never had the graph walked
    assert gc.isenabled() and gc.get_freeze_count() == 0
