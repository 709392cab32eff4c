"""The Prometheus rules, proven by promtool: each alert fires exactly when it should, costs add up.

Test files are generated here in promtool's `values` notation (`a+bxn`: n+1 samples a minute apart).
promtool 2.42 compares floats exactly and annotations in full, so expected values are computed with
the same arithmetic Prometheus does, and summaries are written out.
"""

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.monitoring.alerts import (
    Record,
    Severity,
    alert_names,
    kebab,
    prometheus_rule_manifest,
    render_rule_groups,
    runbook_url,
)
from components.monitoring.lending_metrics import LAST_DECISION, MOVES, NODES
from components.site.site import Site
from runbooks.plan.files import RULES_FILE, artifacts
from tests.builders import REPO, parse, prod_values, with_changes

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (apt-get install --no-install-recommends prometheus)"
)

A800 = {"Hostname": "gpu-a800-11", "gpu": "0", "UUID": "GPU-a800-11-0", "modelName": "NVIDIA A800-SXM4-80GB"}
RTX = {"Hostname": "gpu-4090-01", "modelName": "NVIDIA GeForce RTX 4090"}


def selector(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    return {"series": selector(name, labels), "values": values}


def samples(*runs: tuple[str, int]) -> str:
    """Explicit samples one minute apart: ("_", 60) is an hour without data, ("30", 1441) a day at 30."""
    return " ".join(value for value, count in runs for _ in range(count))


@dataclass
class Case:
    alert: str
    eval_time: str
    input_series: list[dict[str, str]]
    fired: list[tuple[dict[str, str], str]] = field(default_factory=list)
    """(labels besides severity, summary) of every alert expected to fire."""


def site() -> Site:
    return parse(prod_values())


def alert_test(s: Site, case: Case) -> dict[str, Any]:
    severity = next(r["labels"]["severity"] for g in render_rule_groups(s)["groups"] for r in g["rules"]
                    if r.get("alert") == case.alert)
    return {
        "interval": "1m",
        "input_series": case.input_series,
        "alert_rule_test": [{
            "eval_time": case.eval_time,
            "alertname": case.alert,
            "exp_alerts": [
                {"exp_labels": {**labels, "severity": severity},
                 "exp_annotations": {"summary": summary, "runbook_url": runbook_url(s, case.alert)}}
                for labels, summary in case.fired
            ],
        }],
    }


def promtool_test(rules_site: Site, tests: list[dict[str, Any]], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    (tmp_path / "rules.yaml").write_text(artifacts(rules_site)[RULES_FILE])
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False))
    return subprocess.run([PROMTOOL, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)


def util(labels: dict[str, str], values: str) -> dict[str, str]:
    return series("DCGM_FI_DEV_GPU_UTIL", labels, values)


DAY = 24 * 60


def low_util_summary(avg: str) -> str:
    return f"GPU 0 on gpu-a800-11 averaged {avg} % utilization over 24h (under 30 %)"


UTILIZATION = [
    pytest.param(Case("GpuUtilizationLow", "24h", [util(A800, f"29.9x{DAY}")], [(A800, low_util_summary("29.9"))]),
                 id="fires for a GPU averaging 29.9 % over a day"),
    pytest.param(Case("GpuUtilizationLow", "24h", [util(A800, f"30x{DAY}")]),
                 id="stays quiet for a GPU averaging exactly 30 %"),
    pytest.param(Case("GpuUtilizationLow", "24h", [util(A800, samples(("_", 60), ("29.9", DAY - 60 + 1)))]),
                 id="stays quiet for a GPU with only 23 h of data"),
    pytest.param(Case("GpuUtilizationLow", "25h", [util(A800, samples(("_", 60), ("29.9", DAY + 1)))],
                      [(A800, low_util_summary("29.9"))]),
                 id="fires once that GPU has a full day of data"),
    pytest.param(Case("GpuUtilizationLow", "24h", [
        util({**A800, "namespace": "speech", "pod": "asr-a"}, samples(("20", DAY // 2 + 1))),
        util({**A800, "namespace": "speech", "pod": "asr-b"}, samples(("_", DAY // 2 + 1), ("20", DAY // 2))),
    ], [({**A800, "team": "speech"}, low_util_summary("20.0"))]),
        id="fires with its team for a GPU whose pod changes mid-window"),
]


def gpu_alert_cases() -> list[Any]:
    where = "GPU 0 on gpu-a800-11"
    temp = "DCGM_FI_DEV_GPU_TEMP"
    return [
        pytest.param(Case("GpuTemperatureHigh", "3m", [series(temp, A800, "80 86 86 86")],
                          [(A800, f"{where} is at 86.0 C (over 85 C)")]),
                     id="temperature fires at 86 C held 2 m"),
        pytest.param(Case("GpuTemperatureHigh", "2m", [series(temp, A800, "80 86 86")]),
                     id="temperature stays quiet at 86 C held 1 m"),
        pytest.param(Case("GpuTemperatureHigh", "10m", [series(temp, A800, "85x10")]),
                     id="temperature stays quiet at exactly 85 C"),
        pytest.param(Case("GpuHbmTemperatureHigh", "3m", [series("DCGM_FI_DEV_MEMORY_TEMP", A800, "90 96 96 96")],
                          [(A800, f"HBM of {where} is at 96.0 C (over 95 C)")]),
                     id="HBM temperature fires at 96 C held 2 m"),
        pytest.param(Case("GpuHbmTemperatureHigh", "10m", [series("DCGM_FI_DEV_MEMORY_TEMP", A800, "95x10")]),
                     id="HBM temperature stays quiet at exactly 95 C"),
        pytest.param(Case("GpuThermalThrottling", "15m",
                          [series("DCGM_FI_DEV_THERMAL_VIOLATION", A800, "0+60000000x15")],
                          [(A800, f"{where} was thermally throttled 100.0 % of the last 10m")]),
                     id="throttling fires for a GPU throttled all the time"),
        pytest.param(Case("GpuThermalThrottling", "15m", [series("DCGM_FI_DEV_THERMAL_VIOLATION", A800, "0x15")]),
                     id="throttling stays quiet for a GPU never throttled"),
        pytest.param(Case("GpuXidHardwareError", "4m", [series("DCGM_FI_DEV_XID_ERRORS", A800, "0 0 79 79 79")],
                          [({**A800, "xid": "79"}, f"{where} logged hardware XID 79")]),
                     id="XID 79 (fallen off the bus) fires as hardware"),
        pytest.param(Case("GpuXidHardwareError", "4m", [series("DCGM_FI_DEV_XID_ERRORS", A800, "0 0 13 13 13")]),
                     id="XID 13 is not hardware"),
        pytest.param(Case("GpuXidApplicationError", "4m",
                          # The owner comes from the GPU's utilization series, as dcgm-exporter labels them all.
                          [series("DCGM_FI_DEV_XID_ERRORS", {**A800, "namespace": "speech", "pod": "asr"},
                                  "0 0 13 13 13"),
                           util({**A800, "namespace": "speech", "pod": "asr"}, "90x4")],
                          [({**A800, "xid": "13", "team": "speech"}, f"{where} logged application XID 13")]),
                     id="XID 13 fires as application error for the team using the GPU"),
        pytest.param(Case("GpuXidApplicationError", "4m", [series("DCGM_FI_DEV_XID_ERRORS", A800, "0 0 79 79 79")]),
                     id="XID 79 is not an application error"),
        pytest.param(Case("GpuXidApplicationError", "4m", [series("DCGM_FI_DEV_XID_ERRORS", A800, "0x4")]),
                     id="XID 0 is no error"),
        pytest.param(Case("GpuEccDoubleBitError", "10m",
                          [series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", A800, samples(("0", 3), ("1", 8)))],
                          [(A800, f"{where} had 1.0 double-bit ECC errors in 10m")]),
                     id="ECC fires on one double-bit error"),
        pytest.param(Case("GpuEccDoubleBitError", "10m", [series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", A800, "3x10")]),
                     id="ECC stays quiet for old errors that do not grow"),
        pytest.param(Case("GpuRowRemapFailure", "3m", [series("DCGM_FI_DEV_ROW_REMAP_FAILURE", A800, "0 0 1 1")],
                          [(A800, f"{where} failed to remap a memory row")]),
                     id="row remap failure fires"),
        pytest.param(Case("GpuRowRemapFailure", "3m", [series("DCGM_FI_DEV_ROW_REMAP_FAILURE", A800, "0x3")]),
                     id="row remap stays quiet while remapping works"),
        pytest.param(Case("GpuNvlinkErrors", "10m", [
            series("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", A800, "5x10"),
            series("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", A800, samples(("0", 3), ("2", 8))),
        ], [(A800, f"{where} had 2.0 NVLink errors in 10m")]), id="NVLink fires on new replay errors"),
        pytest.param(Case("GpuNvlinkErrors", "10m",
                          [series("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", A800, "5x10")]),
                     id="NVLink stays quiet for old errors that do not grow"),
        pytest.param(Case("GpuMissing", "6m",
                          [series(temp, {**RTX, "gpu": str(i), "UUID": f"GPU-r{i}"}, "40x6") for i in range(7)],
                          [({"Hostname": "gpu-4090-01"}, "Only 7 GPUs visible on gpu-4090-01")]),
                     id="a node showing 7 of its 8 GPUs fires"),
        pytest.param(Case("GpuMissing", "6m",
                          [series(temp, {**RTX, "gpu": str(i), "UUID": f"GPU-r{i}"}, "40x6") for i in range(8)]),
                     id="a node showing all 8 GPUs stays quiet"),
        pytest.param(Case("DcgmExporterDown", "6m", every_node_but(site(), "gpu-a800-05"),
                          [({"Hostname": "gpu-a800-05"}, "No GPU metrics from gpu-a800-05 (exporter or node down)")]),
                     id="a node without GPU metrics for 5 m fires"),
        pytest.param(Case("DcgmExporterDown", "6m", every_node_but(site(), "none")),
                     id="every node reporting stays quiet"),
        pytest.param(Case("SlurmNodesUnavailable", "16m", [
            series("slurm_nodes_down", {}, "1x16"), series("slurm_nodes_drain", {}, "0x16"),
            series("slurm_nodes_fail", {}, "0x16"),
        ], [({}, "1 of 10 Slurm GPU nodes are down, drained or failed (flex nodes lent to inference not counted)")]),
            id="a Slurm node down for 15 m fires"),
        pytest.param(Case("SlurmNodesUnavailable", "16m", [
            series("slurm_nodes_down", {}, "0x16"), series("slurm_nodes_drain", {}, "1x16"),
            series("slurm_nodes_fail", {}, "0x16"), lent("gpu-a800-09", "true"), lent("gpu-a800-10", "false"),
        ]), id="a flex node drained because it is lent to inference stays quiet"),
        pytest.param(Case("SlurmNodesUnavailable", "16m", [
            series("slurm_nodes_down", {}, "0x16"), series("slurm_nodes_drain", {}, "2x16"),
            series("slurm_nodes_fail", {}, "0x16"), lent("gpu-a800-09", "true"),
        ], [({}, "1 of 10 Slurm GPU nodes are down, drained or failed (flex nodes lent to inference not counted)")]),
            id="a drained node besides the lent one fires"),
        pytest.param(Case("SlurmNodesUnavailable", "16m", [
            series(f"slurm_nodes_{state}", {}, "0x16") for state in ("down", "drain", "fail")
        ]), id="a Slurm pool with every node up stays quiet"),
        pytest.param(Case("KubernetesGpuNodeNotReady", "6m", [node_ready("gpu-4090-02", "0x6")],
                          [({**ready_labels("gpu-4090-02"), "Hostname": "gpu-4090-02"},
                            "Kubernetes GPU node gpu-4090-02 is not Ready")]),
                     id="a Kubernetes GPU node NotReady for 5 m fires"),
        pytest.param(Case("KubernetesGpuNodeNotReady", "6m", [node_ready("gpu-4090-02", "1x6")]),
                     id="a Ready Kubernetes GPU node stays quiet"),
        pytest.param(Case("KubernetesGpuNodeNotReady", "6m", [node_ready("cpu-login-01", "0x6")]),
                     id="a NotReady node outside the GPU pools stays quiet"),
        pytest.param(Case("CheckpointHotTierFilling", "16m", [series(HOT_FILL, MOVER, "0.86x16"),
                                                              series(RUN_AT, MOVER, "0x16")],
                          [(MOVER_NAME, "NFS hot tier of checkpoint-mover-0 is 86.0 % full (over 85 %)")]),
                     id="a hot tier over 85 % for 15 m fires"),
        pytest.param(Case("CheckpointHotTierFilling", "16m", [series(HOT_FILL, MOVER, "0.85x16"),
                                                              series(RUN_AT, MOVER, "0x16")]),
                     id="a hot tier at exactly 85 % stays quiet"),
        # The mover ran on gpu-a800-02 first, then every run landed on gpu-a800-01: -02 keeps its file.
        pytest.param(Case("CheckpointHotTierFilling", "16m", [
            series(HOT_FILL, LEFT, "0.95x16"), series(RUN_AT, LEFT, "0x16"),
            series(HOT_FILL, MOVER, "0.50x16"), series(RUN_AT, MOVER, "60x16"),
        ]), id="a full hot tier in the file of a node the mover left stays quiet"),
        pytest.param(Case("CheckpointMoverFailing", "1m", [
            series(MOVER_ERRORS, {**MOVER, "kind": "checksum"}, "0 1"),
            series(MOVER_ERRORS, {**MOVER, "kind": "cold_full"}, "0 0"),
            series(RUN_AT, MOVER, "0 60"),
        ], [(MOVER, "The last run of checkpoint-mover-0 (on gpu-a800-01:9100) left 1 checkpoints on hot after "
                    "errors")]), id="a mover run with a checksum error fires"),
        pytest.param(Case("CheckpointMoverFailing", "1m", [series(MOVER_ERRORS, {**MOVER, "kind": "checksum"}, "0 0"),
                                                           series(RUN_AT, MOVER, "0 60")]),
                     id="a clean mover run stays quiet"),
        pytest.param(Case("CheckpointMoverFailing", "3m", MOVED_ON,
                          [(LEFT, "The last run of checkpoint-mover-0 (on gpu-a800-02:9100) left 1 checkpoints on hot "
                                  "after errors")]), id="a failed run fires while it is the mover's newest"),
        pytest.param(Case("CheckpointMoverFailing", "10m", MOVED_ON),
                     id="a failed run on a node the mover left resolves once it runs clean on another"),
        pytest.param(Case("LendNotCompleted", "11m", [series(FLEX_NODES, {"owner": "lending"}, "1x11")],
                          [({}, "1 flex nodes drained for inference have not been lent after 600 s: a job the table "
                                "protects (or one Slurm cannot requeue) still runs on them")]),
                     id="a node draining for a lend over 600 s fires"),
        pytest.param(Case("LendNotCompleted", "11m", [series(FLEX_NODES, {"owner": "lending"}, "1x5 0x6")]),
                     id="a lend that completes within 600 s stays quiet"),
        pytest.param(Case("LendingFlapping", "4m", [series(FLEX_MOVES, {"action": "lend"}, "0 1 1 2 2"),
                                                    series(FLEX_MOVES, {"action": "reclaim"}, "0 0 1 1 2")],
                          [({}, "The lending controller moved flex nodes 4.0 times in 1h (at most 3 expected)")]),
                     id="four moves within an hour fire"),
        pytest.param(Case("LendingFlapping", "4m", [series(FLEX_MOVES, {"action": "lend"}, "0 1 1 2 2"),
                                                    series(FLEX_MOVES, {"action": "reclaim"}, "0 0 1 1 1")]),
                     id="three moves within an hour stay quiet"),
        # Stale from 151 s on; pending for 5 m: fires from 8 m.
        pytest.param(Case("LendingControllerDown", "9m", [series(FLEX_LAST, {}, "0x9")],
                          [({}, "The lending controller has not decided for over 150 s: flex nodes stay where they "
                                "are")]), id="a controller that stopped deciding fires"),
        pytest.param(Case("LendingControllerDown", "6m", [series(HOT_FILL, MOVER, "0x6")],
                          [({}, "The lending controller has not decided for over 150 s: flex nodes stay where they "
                                "are")]), id="a controller never scraped fires"),
        pytest.param(Case("LendingControllerDown", "10m", [series(FLEX_LAST, {}, "0+60x10")]),
                     id="a controller deciding every minute stays quiet"),
    ]


HOT_FILL, MOVER_ERRORS = "gpucluster_checkpoint_hot_fill_ratio", "gpucluster_checkpoint_last_run_errors"
RUN_AT = "gpucluster_checkpoint_last_run_timestamp_seconds"
FLEX_NODES, FLEX_MOVES, FLEX_LAST = NODES, MOVES, LAST_DECISION
MOVER_NAME = {"mover": "checkpoint-mover-0"}
MOVER = {"instance": "gpu-a800-01:9100", **MOVER_NAME}
LEFT = {"instance": "gpu-a800-02:9100", **MOVER_NAME}
"""A node the mover ran on before: node-exporter serves the file it left there for as long as the node runs."""
MOVED_ON = [
    # A run with an error on gpu-a800-02 (its file stays), then from minute 5 clean runs on gpu-a800-01.
    series(MOVER_ERRORS, {**LEFT, "kind": "checksum"}, "1x10"), series(RUN_AT, LEFT, "0x10"),
    series(MOVER_ERRORS, {**MOVER, "kind": "checksum"}, samples(("_", 5), ("0", 6))),
    series(RUN_AT, MOVER, samples(("_", 5), ("300", 6))),
]


def every_node_but(s: Site, silent: str) -> list[dict[str, str]]:
    return [series("DCGM_FI_DEV_GPU_TEMP", {"Hostname": n.name, "gpu": "0", "UUID": f"GPU-{n.name}"}, "40x6")
            for g in s.node_groups for n in g.nodes if n.name != silent]


def ready_labels(node: str) -> dict[str, str]:
    return {"node": node, "condition": "Ready", "status": "true"}


def lent(node: str, value: str) -> dict[str, str]:
    """kube_node_labels of a node whose flex-lent label is `value` (an unlabelled node has no label_ key)."""
    return series("kube_node_labels", {"node": node, "label_gpucluster_io_flex_lent": value}, "1x16")


def node_ready(node: str, values: str) -> dict[str, str]:
    return series("kube_node_status_condition", ready_labels(node), values)


@pytest.mark.parametrize(("changes", "interval", "overheat_for"), [
    ({}, "1m", "2m"),  # prod: the rule file as it always was
    ({"monitoring__rule_evaluation_interval_s": 15, "alerting__overheat_for_s": 90}, "15s", "90s"),
])
def test_should_evaluate_and_hold_the_overheat_alerts_as_the_site_says(changes: dict[str, Any], interval: str,
                                                                       overheat_for: str) -> None:
    groups = yaml.safe_load(artifacts(parse(with_changes(prod_values(), **changes)))[RULES_FILE])["groups"]
    assert {group["interval"] for group in groups} == {interval}
    fors = {rule["alert"]: rule.get("for") for group in groups for rule in group["rules"] if "alert" in rule}
    assert (fors["GpuTemperatureHigh"], fors["GpuHbmTemperatureHigh"]) == (overheat_for, overheat_for)


@needs_promtool
def test_should_pass_promtool_check_rules(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    path = tmp_path / "rules.yaml"
    path.write_text(artifacts(site())[RULES_FILE])
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.expected_s(22)
@needs_promtool
@pytest.mark.parametrize("case", UTILIZATION + gpu_alert_cases())
def test_should_fire_exactly_when_the_rule_says(case: Case, tmp_path: Path) -> None:
    s = site()
    result = promtool_test(s, [alert_test(s, case)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
@pytest.mark.parametrize(
    ("change", "case"),
    [
        pytest.param({"monitoring": {"gpu_util_low_pct": 31}}, UTILIZATION[1].values[0],
                     id="utilization threshold 30 -> 31 breaks the 30 % test"),
        pytest.param({"monitoring": {"gpu_util_low_window_h": 23}}, UTILIZATION[2].values[0],
                     id="utilization window 24 -> 23 h breaks the warm-up test"),
        pytest.param({"monitoring": {"gpu_temp_incident_c": 86}}, gpu_alert_cases()[0].values[0],
                     id="temperature threshold 85 -> 86 breaks the 86 C test"),
    ],
)
@pytest.mark.expected_s(22)
def test_should_fail_the_same_test_when_a_threshold_moves(change: dict[str, Any], case: Case,
                                                          tmp_path: Path) -> None:
    # The test file is written for the prod spec; only the rules come from the mutated spec.
    mutated = parse(with_changes(prod_values(), **change))
    result = promtool_test(mutated, [alert_test(site(), case)], tmp_path)
    assert result.returncode != 0, result.stdout


def gateway(team_alias: str, requested_model: str) -> dict[str, str]:
    # LiteLLM's labels: team is its id, team_alias the spec's name; model is the backend's name, requested_model the
    # gateway's (../shared/notes/litellm-offline.md).
    return {"team": f"{team_alias}-id", "team_alias": team_alias, "model": f"backend-{requested_model}",
            "requested_model": requested_model}


def cost_sample(team: str, model: str, token_type: str, value: float) -> dict[str, Any]:
    return {"labels": selector(Record.COST, {"model": model, "team": team, "token_type": token_type}), "value": value}


@needs_promtool
def test_should_price_the_gateways_tokens_per_team_model_and_token_type(tmp_path: Path) -> None:
    s = site()
    prices = {p.model: p for p in s.inference.prices()}
    gpt, qwen = prices["gpt-4o"], prices["qwen2-5-72b"]
    # Counters rising 60/min are 1 token/s; a 1 h window over 1-min samples is exact, so rate() is too.
    inputs = [
        series("litellm_input_tokens_metric_total", gateway("speech", "gpt-4o"), "0+60x130"),
        series("litellm_output_tokens_metric_total", gateway("speech", "gpt-4o"), "0+30x130"),
        series("litellm_input_tokens_metric_total", gateway("vision", "qwen2-5-72b"), "0+120x130"),
        series("litellm_output_tokens_metric_total", gateway("vision", "qwen2-5-72b"), "0+30x130"),
        # A request no key authenticated is nobody's cost.
        series("litellm_input_tokens_metric_total", {**gateway("None", "gpt-4o"), "team": "None"}, "0+60x130"),
    ]
    expected = [
        cost_sample("speech", "gpt-4o", "prompt", 1.0 * gpt.prompt_usd_per_mtok * 3600 / 1e6),
        cost_sample("speech", "gpt-4o", "completion", 0.5 * gpt.completion_usd_per_mtok * 3600 / 1e6),
        cost_sample("vision", "qwen2-5-72b", "prompt", 2.0 * qwen.prompt_usd_per_mtok * 3600 / 1e6),
        cost_sample("vision", "qwen2-5-72b", "completion", 0.5 * qwen.completion_usd_per_mtok * 3600 / 1e6),
    ]
    test = {"interval": "1m", "input_series": inputs, "promql_expr_test": [
        {"expr": Record.COST, "eval_time": "2h", "exp_samples": expected},
        {"expr": f'{Record.TEAM_COST}{{team="speech"}}', "eval_time": "2h",
         "exp_samples": [{"labels": selector(Record.TEAM_COST, {"team": "speech"}),
                          "value": sum(e["value"] for e in expected[:2])}]},
    ]}
    result = promtool_test(s, [test], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_should_price_a_served_model_at_its_replicas_gpu_hour_cost() -> None:
    s = site()
    qwen = next(m for m in s.inference.models if m.name == "qwen2-5-72b")
    price = next(p for p in s.inference.prices() if p.model == qwen.name)
    replica_hour = s.inference.gpu_hour_usd[qwen.gpu_model] * qwen.gpus_per_replica
    # A replica serving only prompt tokens for an hour earns back exactly its GPU-hours.
    assert price.prompt_usd_per_mtok * qwen.throughput.prompt_tokens_per_s * 3600 / 1e6 == pytest.approx(replica_hour)
    assert price.completion_usd_per_mtok * qwen.throughput.completion_tokens_per_s * 3600 / 1e6 == pytest.approx(
        replica_hour)


def test_should_link_every_alert_to_its_sop_under_docs_sop() -> None:
    s = site()
    for name in alert_names(s):
        assert runbook_url(s, name) == f"{s.alerting.runbook_base_url}/{kebab(name)}.md"
        assert (REPO / "docs" / "sop" / f"{kebab(name)}.md").is_file(), name


def test_should_label_every_alert_with_a_known_severity() -> None:
    rules = [r for g in render_rule_groups(site())["groups"] for r in g["rules"] if "alert" in r]
    assert {r["labels"]["severity"] for r in rules} == {s.value for s in Severity}


def test_should_wrap_the_same_groups_in_a_prometheus_rule() -> None:
    s = site()
    manifest = prometheus_rule_manifest(s)
    assert (manifest["apiVersion"], manifest["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert manifest["spec"] == render_rule_groups(s)


# --- failure modes the acceptance campaign drills: storage jitter, a failed model swap ----------------------------

NFS_WRITES = {"Hostname": "gpu-a800-05", "export": "nfs-hot-01.dc1.internal:/exports", "operation": "WRITE",
              "protocol": "tcp", "mountaddr": "10.20.2.1", "instance": "10.20.1.15:9100"}
"""node-exporter's mountstats labels (collector/mountstats_linux.go), with the Hostname the stack's scrape adds."""
JITTER = ("NFS writes from gpu-a800-05 to nfs-hot-01.dc1.internal:/exports take 200.0 ms on average (over 100 ms): "
          "checkpoints stall")


def nfs(labels: dict[str, str], writes_per_min: int, ms_per_write: int, minutes: int = 6) -> list[dict[str, str]]:
    """A mount's request and request-time counters: `writes_per_min` operations a minute, each taking `ms`."""
    seconds = writes_per_min * ms_per_write // 1000
    return [series("node_mountstats_nfs_operations_requests_total", labels, f"0+{writes_per_min}x{minutes}"),
            series("node_mountstats_nfs_operations_request_time_seconds_total", labels, f"0+{seconds}x{minutes}")]


def requests(model: str, per_min: int, failed_per_min: int, status: str = "500", team_alias: str = "speech",
             minutes: int = 8) -> list[dict[str, str]]:
    labels = gateway(team_alias, model)
    return [series("litellm_proxy_total_requests_metric_total", labels, f"0+{per_min}x{minutes}"),
            series("litellm_proxy_failed_requests_metric_total", {**labels, "exception_status": status},
                   f"0+{failed_per_min}x{minutes}")]


SHARE = "nfs-hot-02.dc1.internal:/exports/speech"
SWAP_FAILING = ("5.0 % of requests to qwen2-5-72b fail at the gateway (over 1 %): a model swap or its replicas are "
                "failing")
FAILURE_MODES = [
    pytest.param(Case("StorageJitter", "4m", nfs(NFS_WRITES, 600, 200),
                      [({"Hostname": "gpu-a800-05", "export": "nfs-hot-01.dc1.internal:/exports"}, JITTER)]),
                 id="hot-tier writes at 200 ms for a minute past the window fire"),
    pytest.param(Case("StorageJitter", "4m", nfs({**NFS_WRITES, "export": SHARE}, 600, 200),
                      [({"Hostname": "gpu-a800-05", "export": SHARE},
                        JITTER.replace("nfs-hot-01.dc1.internal:/exports", SHARE))]),
                 id="a team's share on the second server fires too"),
    pytest.param(Case("StorageJitter", "4m", nfs(NFS_WRITES, 600, 90)), id="hot-tier writes at 90 ms stay quiet"),
    pytest.param(Case("StorageJitter", "4m", nfs({**NFS_WRITES, "operation": "READ"}, 600, 200)),
                 id="slow reads stay quiet"),
    pytest.param(Case("StorageJitter", "4m", nfs({**NFS_WRITES, "export": "home.dc1.internal:/exports"}, 600, 200)),
                 id="slow writes to a share outside the hot tier stay quiet"),
    pytest.param(Case("StorageJitter", "1m", nfs(NFS_WRITES, 600, 200)),
                 id="slow writes stay pending for their first minute"),
    pytest.param(Case("ModelRequestsFailing", "8m", requests("qwen2-5-72b", 600, 30),
                      [({"requested_model": "qwen2-5-72b"}, SWAP_FAILING)]),
                 id="5 % of a served model's requests failing fires"),
    pytest.param(Case("ModelRequestsFailing", "8m", requests("qwen2-5-72b", 600, 3)),
                 id="0.5 % failing stays quiet"),
    pytest.param(Case("ModelRequestsFailing", "8m", requests("qwen2-5-72b", 600, 30, status="429")),
                 id="refused requests (4xx) stay quiet"),
    pytest.param(Case("ModelRequestsFailing", "8m", requests("qwen2-5-72b", 600, 30, team_alias="None")),
                 id="requests no key authenticated stay quiet"),
    pytest.param(Case("ModelRequestsFailing", "8m", requests("gpt-4o", 600, 30)),
                 id="an external API failing stays quiet (not a served model)"),
]


@needs_promtool
@pytest.mark.parametrize("case", FAILURE_MODES)
def test_should_raise_each_failure_modes_alert_exactly_when_the_rule_says(case: Case, tmp_path: Path) -> None:
    s = site()
    result = promtool_test(s, [alert_test(s, case)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
@pytest.mark.parametrize(("change", "case"), [
    pytest.param({"storage__nfs_hot__write_latency_alert_ms": 250}, FAILURE_MODES[0].values[0],
                 id="storage latency threshold 100 -> 250 ms breaks the 200 ms test"),
    pytest.param({"storage__nfs_hot__write_latency_alert_ms": 80}, FAILURE_MODES[2].values[0],
                 id="storage latency threshold 100 -> 80 ms breaks the 90 ms test"),
    pytest.param({"rollout": {"gates": {"max_inference_error_pct": 6}}}, FAILURE_MODES[6].values[0],
                 id="error budget 1 -> 6 % breaks the 5 % test"),
])
def test_should_fail_a_failure_modes_test_when_its_threshold_moves(change: dict[str, Any], case: Case,
                                                                  tmp_path: Path) -> None:
    mutated = parse(with_changes(prod_values(), **change))
    result = promtool_test(mutated, [alert_test(site(), case)], tmp_path)
    assert result.returncode != 0, result.stdout


def test_should_drill_storage_jitter_on_its_own_alert_and_sop() -> None:
    # The drill waits for the alert the production rules raise, and the alert's runbook is the drill's SOP.
    s = site()
    (drill,) = [d for d in s.acceptance.drills if d.kind == "storage_jitter"]
    assert drill.alert in alert_names(s) and runbook_url(s, drill.alert).endswith(f"/{drill.sop}.md")
