"""The Grafana dashboards: their PromQL proven by promtool, their structure by the rules Grafana and the sidecar need.

No Grafana server installs here, so each panel query is checked by Prometheus' own parser: every target's
expression, variables substituted as Grafana would for "All", becomes a recording rule for
`promtool check rules`; a few are evaluated on sample series with `promtool test rules` to prove the spec's
rack, pool and team mappings.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.models.dashboard import Dashboard

from components.gpu_operator.dcgm_counters import COUNTERS
from components.monitoring.alerts import gpu_recording_rules, render_rule_groups
from components.monitoring.dashboards import (
    FOLDER_ANNOTATION,
    LLM_COST_UID,
    NAMESPACE,
    SIDECAR_LABEL,
    SIDECAR_LABEL_VALUE,
    as_sent,
    dashboard_configmaps,
    panels,
    render_dashboards,
    targets,
    token_types,
)
from components.site.site import Site
from tests.builders import parse, prod_values

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (apt-get install --no-install-recommends prometheus)"
)

RECORDED = re.compile(r"\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b")
DCGM_FIELD = re.compile(r"\bDCGM_FI_\w+")

GOLDEN = Path(__file__).parent / "golden"
SITE = parse(prod_values())
BOARDS = render_dashboards(SITE)


def as_rules(board: dict[str, Any]) -> list[dict[str, str]]:
    return [{"record": f"dashboard:panel{panel['id']}:{target['refId']}", "expr": as_sent(target["expr"], board)}
            for panel, target in targets(board)]


def expr_of(board: dict[str, Any], title: str) -> str:
    (target,) = [t for p, t in targets(board) if p["title"] == title]
    return as_sent(target["expr"], board)


def run_promtool(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)


@needs_promtool
@pytest.mark.parametrize("uid", BOARDS)
def test_should_parse_every_panel_query_with_promtool(uid: str, tmp_path: Path) -> None:
    rules = as_rules(BOARDS[uid])
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": uid, "rules": rules}]}))
    result = run_promtool(tmp_path, "check", "rules", "rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


@pytest.mark.parametrize("uid", BOARDS)
def test_should_define_every_variable_a_query_uses(uid: str) -> None:
    for _, target in targets(BOARDS[uid]):
        assert "$" not in as_sent(target["expr"], BOARDS[uid])
    with pytest.raises(ValueError, match=r"\$nope is not a variable of the dashboard"):
        as_sent("up{x=~\"$nope\"}", BOARDS[uid])


@pytest.mark.parametrize("uid", BOARDS)
def test_should_give_every_panel_a_unique_id(uid: str) -> None:
    ids = [p["id"] for p in panels(BOARDS[uid])]
    assert all(isinstance(i, int) for i in ids)
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("uid", BOARDS)
def test_should_give_every_target_a_ref_id_unique_in_its_panel(uid: str) -> None:
    for panel in panels(BOARDS[uid]):
        ref_ids = [t.get("refId") for t in panel.get("targets", [])]
        assert all(ref_ids) and len(ref_ids) == len(set(ref_ids)), panel["title"]


@pytest.mark.parametrize("uid", BOARDS)
def test_should_query_through_the_datasource_variable(uid: str) -> None:
    board = BOARDS[uid]
    assert {"type": "datasource", "query": "prometheus"}.items() <= board["templating"]["list"][0].items()
    uid_ref = "${" + board["templating"]["list"][0]["name"] + "}"
    for panel, target in targets(board):
        assert panel["datasource"]["uid"] == target["datasource"]["uid"] == uid_ref


@pytest.mark.parametrize("uid", BOARDS)
def test_should_carry_the_sdk_schema_version(uid: str) -> None:
    assert BOARDS[uid]["schemaVersion"] == Dashboard().schema_version == 41


def test_should_key_every_dashboard_by_its_uid() -> None:
    assert list(BOARDS) == ["gpu-fleet", "pools", "team-usage", "llm-cost", "inference"]
    assert all(board["uid"] == uid for uid, board in BOARDS.items())


@pytest.mark.parametrize("uid", BOARDS, ids=lambda uid: f"prod {uid} matches its golden copy")
def test_should_render_prod_dashboards_as_reviewed(uid: str) -> None:
    assert json.dumps(BOARDS[uid], indent=2, sort_keys=True) + "\n" == (GOLDEN / f"{uid}.json").read_text()


def test_should_round_trip_through_json() -> None:
    assert json.loads(json.dumps(BOARDS)) == BOARDS


def test_should_read_only_recorded_series_the_rules_define() -> None:
    recorded = {r["record"] for g in render_rule_groups(SITE)["groups"] for r in g["rules"] if "record" in r}
    used = {name for board in BOARDS.values() for _, t in targets(board) for name in RECORDED.findall(t["expr"])}
    assert used and used <= recorded, used - recorded


def test_should_read_only_dcgm_fields_the_exporter_enables() -> None:
    enabled = {field for field, _, _ in COUNTERS}
    used = {name for board in BOARDS.values() for _, t in targets(board) for name in DCGM_FIELD.findall(t["expr"])}
    assert used and used <= enabled, used - enabled


def test_should_publish_llm_cost_under_the_uid_policy_checks() -> None:
    assert LLM_COST_UID == "llm-cost"
    assert BOARDS["llm-cost"]["uid"] == "llm-cost"


def test_should_show_each_token_type_on_llm_cost() -> None:
    assert token_types(SITE) == ["prompt", "completion"]
    shown = {t["legendFormat"] for p, t in targets(BOARDS["llm-cost"]) if p["title"] == "Cost per token type (USD/h)"}
    assert shown == set(token_types(SITE))
    for token_type in token_types(SITE):
        assert any(f'token_type="{token_type}"' in t["expr"] for _, t in targets(BOARDS["llm-cost"]))


def test_should_offer_the_spec_teams_and_nodes_as_variables() -> None:
    def options(uid: str, name: str) -> list[str]:
        (variable,) = [v for v in BOARDS[uid]["templating"]["list"] if v["name"] == name]
        return str(variable["query"]).split(",")

    assert options("team-usage", "team") == options("llm-cost", "team") == [t.name for t in SITE.teams]
    assert len(options("gpu-fleet", "node")) == 16


@pytest.mark.parametrize("uid", ["gpu-fleet", "pools"])
def test_should_map_every_spec_node_to_its_rack_or_pool(uid: str) -> None:
    exprs = " ".join(t["expr"] for _, t in targets(BOARDS[uid]))
    assert all(n.name in exprs for g in SITE.node_groups for n in g.nodes)


def test_should_state_each_pool_capacity_from_the_spec() -> None:
    capacity = expr_of(BOARDS["pools"], "GPUs per pool (spec)")
    assert 'label_replace(vector(64), "pool", "slurm"' in capacity
    assert 'label_replace(vector(16), "pool", "flex"' in capacity
    assert 'label_replace(vector(48), "pool", "kubernetes"' in capacity


# ConfigMaps


def configmaps() -> dict[str, dict[str, Any]]:
    return {cm["metadata"]["name"]: cm for cm in dashboard_configmaps(SITE)}


def test_should_ship_one_configmap_per_dashboard() -> None:
    assert sorted(configmaps()) == sorted(f"grafana-dashboard-{uid}" for uid in BOARDS)


@pytest.mark.parametrize("uid", BOARDS)
def test_should_label_the_configmap_for_the_grafana_sidecar(uid: str) -> None:
    meta = configmaps()[f"grafana-dashboard-{uid}"]["metadata"]
    assert meta["namespace"] == NAMESPACE == "monitoring"
    assert meta["labels"][SIDECAR_LABEL] == SIDECAR_LABEL_VALUE
    assert (SIDECAR_LABEL, SIDECAR_LABEL_VALUE) == ("grafana_dashboard", "1")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", meta["name"]) and len(meta["name"]) <= 63


@pytest.mark.parametrize("uid", BOARDS)
def test_should_carry_the_dashboard_as_valid_json(uid: str) -> None:
    cm = configmaps()[f"grafana-dashboard-{uid}"]
    assert cm["apiVersion"] == "v1" and cm["kind"] == "ConfigMap"
    assert json.loads(cm["data"][f"{uid}.json"]) == BOARDS[uid]
    # A ConfigMap holds at most 1 MiB.
    assert len(json.dumps(cm)) < 1024 * 1024


def test_should_file_team_dashboards_apart_from_platform_ones() -> None:
    folders = {cm["metadata"]["name"]: cm["metadata"]["annotations"][FOLDER_ANNOTATION] for cm in configmaps().values()}
    assert folders["grafana-dashboard-team-usage"] == folders["grafana-dashboard-llm-cost"]
    assert folders["grafana-dashboard-gpu-fleet"] == folders["grafana-dashboard-pools"]
    assert folders["grafana-dashboard-llm-cost"] != folders["grafana-dashboard-gpu-fleet"]


# What the mappings compute, on sample series


def gpu(host: str, index: int, **tenant: str) -> str:
    labels = {"Hostname": host, "gpu": str(index), "UUID": f"GPU-{host}-{index}", "modelName": "NVIDIA A800-SXM4-80GB",
              **tenant}
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def evaluate(tmp_path: Path, site: Site, expr: str, input_series: list[dict[str, str]],
             expected: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """promtool test rules on the per-GPU recording rules followed by expr (one group: they run in order)."""
    rules = [*gpu_recording_rules(site), {"record": "panel:under_test", "expr": expr}]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "panel", "rules": rules}]}))
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": input_series,
        "promql_expr_test": [{"expr": "panel:under_test", "eval_time": "5m", "exp_samples": expected}],
    }]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(tests))
    return run_promtool(tmp_path, "test", "rules", "test.yml")


@needs_promtool
def test_should_sum_each_gpu_power_into_its_spec_rack_once(tmp_path: Path) -> None:
    series = [
        # One GPU seen twice while its pod changes: counted once.
        {"series": "DCGM_FI_DEV_POWER_USAGE" + gpu("gpu-a800-01", 0, pod="old"), "values": "300x10"},
        {"series": "DCGM_FI_DEV_POWER_USAGE" + gpu("gpu-a800-01", 0, pod="new"), "values": "300x10"},
        {"series": "DCGM_FI_DEV_POWER_USAGE" + gpu("gpu-a800-04", 1), "values": "250x10"},
        {"series": "DCGM_FI_DEV_POWER_USAGE" + gpu("gpu-4090-01", 0), "values": "400x10"},
        {"series": "DCGM_FI_DEV_POWER_USAGE" + gpu("stray-01", 0), "values": "100x10"},
    ]
    expected = [
        {"labels": 'panel:under_test{rack="a01"}', "value": 550},
        {"labels": 'panel:under_test{rack="b01"}', "value": 400},
        {"labels": "panel:under_test", "value": 100},
    ]
    result = evaluate(tmp_path, SITE, expr_of(BOARDS["gpu-fleet"], "Power per rack"), series, expected)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_should_average_utilization_over_each_pool_own_nodes(tmp_path: Path) -> None:
    series = [
        {"series": "DCGM_FI_DEV_GPU_UTIL" + gpu("gpu-a800-01", 0), "values": "20x10"},
        {"series": "DCGM_FI_DEV_GPU_UTIL" + gpu("gpu-a800-02", 0), "values": "40x10"},
        {"series": "DCGM_FI_DEV_GPU_UTIL" + gpu("gpu-a800-09", 0), "values": "80x10"},
        {"series": "DCGM_FI_DEV_GPU_UTIL" + gpu("gpu-4090-04", 7), "values": "10x10"},
    ]
    expected = [
        {"labels": 'panel:under_test{pool="slurm"}', "value": 30},
        {"labels": 'panel:under_test{pool="flex"}', "value": 80},
        {"labels": 'panel:under_test{pool="kubernetes"}', "value": 10},
    ]
    result = evaluate(tmp_path, SITE, expr_of(BOARDS["pools"], "Mean utilization"), series, expected)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
@pytest.mark.parametrize(("labels", "lent"), [
    pytest.param({"gpu-a800-09": "true", "gpu-a800-10": "false"}, 1, id="counts the flex nodes labelled lent"),
    pytest.param({}, 0, id="shows 0 while nothing is lent"),
])
def test_should_count_the_flex_nodes_lent_to_inference(tmp_path: Path, labels: dict[str, str], lent: int) -> None:
    series = [{"series": f'kube_node_labels{{node="{node}", label_gpucluster_io_flex_lent="{value}"}}',
               "values": "1x10"} for node, value in labels.items()]
    expected = [{"labels": "panel:under_test", "value": lent}]
    result = evaluate(tmp_path, SITE, expr_of(BOARDS["pools"], "Flex nodes lent to inference"), series, expected)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_should_count_gpus_for_the_pod_namespace_and_the_slurm_account(tmp_path: Path) -> None:
    series = [
        {"series": "DCGM_FI_DEV_GPU_UTIL" + gpu("gpu-4090-01", 0, namespace="speech", pod="asr-0"), "values": "90x10"},
        {"series": "DCGM_FI_DEV_GPU_UTIL" + gpu("gpu-4090-01", 1, namespace="speech", pod="asr-1"), "values": "70x10"},
        {"series": "DCGM_FI_DEV_GPU_UTIL" + gpu("gpu-a800-01", 0, hpc_job="4242"), "values": "50x10"},
        {"series": 'slurm_job_account{slurmjobid="4242", account="vision"}', "values": "1x10"},
        # Not a team's: kube-system is no team namespace.
        {"series": "DCGM_FI_DEV_GPU_UTIL" + gpu("gpu-4090-02", 0, namespace="kube-system"), "values": "5x10"},
    ]
    expected = [
        {"labels": 'panel:under_test{team="speech"}', "value": 2},
        {"labels": 'panel:under_test{team="vision"}', "value": 1},
    ]
    result = evaluate(tmp_path, SITE, expr_of(BOARDS["team-usage"], "GPUs in use"), series, expected)
    assert result.returncode == 0, result.stdout + result.stderr
