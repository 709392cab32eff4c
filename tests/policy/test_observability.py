"""Observability policies on a monitoring-stack fixture that follows the contract in docs/policy.md."""

from typing import Any

import observability as obs
import pytest
from common import MONITORING_STACK_TYPE
from pulumi_policy import StackValidationPolicy
from pulumi_policy.proxy import UNKNOWN_ARRAY_VALUE, UNKNOWN_BOOLEAN_VALUE, UNKNOWN_STRING_VALUE

from tests.policy.builders import changed, judge_stack, resource

IDLE = {"alert": "GpuUtilizationLow", "severity": "tuning", "for": "0m",
        "expr": "avg_over_time(gpu:dcgm_gpu_util:max[24h]) < 30\n"
                "and on (Hostname, gpu) (gpu:dcgm_gpu_util:max offset 24h)"}
HOT = {"alert": "GpuTemperatureHigh", "expr": "gpu:dcgm_gpu_temp:max > 85", "for": "2m", "severity": "critical"}
MONITORING: dict[str, Any] = {
    "alerts": [IDLE, HOT],
    "alertmanager": {"critical_receivers": ["oncall", "incident"]},
    "dashboards": ["gpu-fleet", "llm-cost"],
}


def judge(policy: StackValidationPolicy, props: dict[str, Any], config: dict[str, Any] | None = None) -> list[str]:
    return judge_stack(policy, resource(MONITORING_STACK_TYPE, "prod-monitoring", props), config=config).messages


def alerts(*exprs: str) -> dict[str, Any]:
    return changed(MONITORING, alerts=[{"alert": f"Rule{i}", "expr": e, "for": "0m", "severity": "warning"}
                                       for i, e in enumerate(exprs)])


M = "Stack prod-monitoring"
NO_IDLE = (f"{M}: no alert averages DCGM_FI_DEV_GPU_UTIL (or a gpu:dcgm_gpu_util recording rule) over at most "
           "24 h and fires under at least 30 %")
NO_HOT = f"{M}: no alert fires when DCGM_FI_DEV_GPU_TEMP (or a gpu:dcgm_gpu_temp recording rule) is > 85 C"


@pytest.mark.parametrize(("policy", "props", "config", "expected"), [
    pytest.param(obs.GPU_IDLE_ALERT, MONITORING, None, [], id="should admit the idle alert on the recorded series"),
    pytest.param(obs.GPU_IDLE_ALERT, alerts("avg_over_time(DCGM_FI_DEV_GPU_UTIL{pool=\"slurm\"}[1d]) <= 30"), None,
                 [], id="should admit the idle alert on the raw DCGM series over 1d"),
    pytest.param(obs.GPU_IDLE_ALERT, alerts("avg_over_time(gpu:dcgm_gpu_util:max[24h]) < 20"), None,
                 [f"{NO_IDLE}; found Rule0 fires under 20 % over 24 h"],
                 id="should deny an idle alert under a lower threshold"),
    pytest.param(obs.GPU_IDLE_ALERT, alerts("avg_over_time(DCGM_FI_DEV_GPU_UTIL[48h]) < 30"), None,
                 [f"{NO_IDLE}; found Rule0 fires under 30 % over 48 h"],
                 id="should deny an idle alert over a longer window"),
    pytest.param(obs.GPU_IDLE_ALERT, alerts("DCGM_FI_DEV_GPU_UTIL < 30"), None, [NO_IDLE],
                 id="should deny an idle alert that does not average"),
    pytest.param(obs.GPU_IDLE_ALERT, MONITORING, {"threshold_pct": 40},
                 [f"{M}: no alert averages DCGM_FI_DEV_GPU_UTIL (or a gpu:dcgm_gpu_util recording rule) over at "
                  "most 24 h and fires under at least 40 %; found GpuUtilizationLow fires under 30 % over 24 h"],
                 id="should deny the idle alert under a tightened threshold"),
    pytest.param(obs.GPU_IDLE_ALERT, changed(MONITORING, alerts=UNKNOWN_ARRAY_VALUE), None,
                 [f"{M}: alerts is unknown at preview; this policy fails closed"],
                 id="should deny alerts unknown at preview"),
    pytest.param(obs.GPU_TEMPERATURE_ALERT, MONITORING, None, [], id="should admit a temperature alert over 85 C"),
    pytest.param(obs.GPU_TEMPERATURE_ALERT, alerts("max by (Hostname) (DCGM_FI_DEV_GPU_TEMP) > 85"), None, [],
                 id="should admit a temperature alert on the raw DCGM series"),
    pytest.param(obs.GPU_TEMPERATURE_ALERT, alerts("gpu:dcgm_gpu_temp:max > 90"), None,
                 [f"{NO_HOT}; found Rule0 fires over 90 C"], id="should deny a temperature alert over 90 C"),
    pytest.param(obs.GPU_TEMPERATURE_ALERT, alerts("gpu:dcgm_memory_temp:max > 85"), None, [NO_HOT],
                 id="should deny a memory temperature alert standing in for the GPU's"),
    pytest.param(obs.GPU_TEMPERATURE_ALERT, MONITORING, {"threshold_c": 80},
                 [f"{M}: no alert fires when DCGM_FI_DEV_GPU_TEMP (or a gpu:dcgm_gpu_temp recording rule) is > 80 C;"
                  " found GpuTemperatureHigh fires over 85 C"],
                 id="should deny the temperature alert under a tightened threshold"),
    pytest.param(obs.CRITICAL_ALERTS_ROUTED, changed(MONITORING, alertmanager__critical_receivers=[]), None,
                 [f"{M}: alertmanager.critical_receivers is empty; critical alerts reach nobody"],
                 id="should deny critical alerts routed nowhere"),
    pytest.param(obs.CRITICAL_ALERTS_ROUTED, MONITORING, None, [], id="should admit critical alerts with receivers"),
    pytest.param(obs.LLM_COST_DASHBOARD, changed(MONITORING, dashboards=["gpu-fleet"]), None,
                 [f"{M}: dashboards ['gpu-fleet'] lack 'llm-cost'"],
                 id="should deny a stack without the cost dashboard"),
    pytest.param(obs.LLM_COST_DASHBOARD, MONITORING, None, [], id="should admit the llm-cost dashboard"),
])
def test_monitoring_rules(policy: StackValidationPolicy, props: dict[str, Any], config: dict[str, Any] | None,
                          expected: list[str]) -> None:
    assert judge(policy, props, config) == expected


@pytest.mark.parametrize("policy", [p for p in obs.POLICIES if p is not obs.MONITORING_STACK_PRESENT],
                         ids=lambda p: f"should leave {p.name} to monitoring-stack-present without a stack")
def test_should_not_judge_the_contract_without_a_stack(policy: StackValidationPolicy) -> None:
    outcome = judge_stack(policy)
    assert (outcome.violations, outcome.not_applicable) == ([], f"no {MONITORING_STACK_TYPE} component in the stack")


@pytest.mark.parametrize(("names", "expected"), [
    pytest.param([], ["no monitoring stack: the stack registers no gpucluster:monitoring:Stack component"],
                 id="should deny a stack without monitoring"),
    pytest.param(["b", "a"], ["2 monitoring stacks (a, b); exactly one may exist"],
                 id="should deny two monitoring stacks"),
    pytest.param(["prod-monitoring"], [], id="should admit exactly one monitoring stack"),
])
def test_monitoring_stack_present(names: list[str], expected: list[str]) -> None:
    stacks = [resource(MONITORING_STACK_TYPE, n, MONITORING) for n in names]
    assert judge_stack(obs.MONITORING_STACK_PRESENT, *stacks).messages == expected


# What is deployed, judged in the Helm releases' values; the releases as the stack installs them.
COLD_WRITE = "http://metrics-cold-victoria-metrics-single-server.monitoring.svc:8428/api/v1/write"
RELEASES: dict[str, dict[str, Any]] = {
    "gpu-operator": {"chart": "gpu-operator", "name": "gpu-operator", "values": {"dcgmExporter": {"enabled": True}}},
    "kube-prometheus-stack": {"chart": "kube-prometheus-stack", "name": "kube-prometheus-stack", "values": {
        "prometheus": {"prometheusSpec": {"retention": "30d", "remoteWrite": [{"url": COLD_WRITE}]}}}},
    "victoria-metrics-single": {"chart": "victoria-metrics-single", "name": "metrics-cold",
                                "values": {"server": {"retentionPeriod": "365d"}}},
}


def judge_releases(policy: StackValidationPolicy, changes: dict[str, dict[str, Any]],
                   config: dict[str, Any] | None = None, without: str = "") -> list[str]:
    releases = [resource("kubernetes:helm.sh/v3:Release", f"prod-{chart}", changed(props, **changes.get(chart, {})))
                for chart, props in RELEASES.items() if chart != without]
    return judge_stack(policy, resource(MONITORING_STACK_TYPE, "prod-monitoring", MONITORING), *releases,
                       config=config).messages


OPERATOR, PROMETHEUS, COLD = "Release prod-gpu-operator", "Release prod-kube-prometheus-stack", \
    "Release prod-victoria-metrics-single"


@pytest.mark.parametrize(("policy", "changes", "config", "expected"), [
    pytest.param(obs.DCGM_EXPORTER_ENABLED, {"gpu-operator": {"values__dcgmExporter__enabled": False}}, None,
                 [f"{OPERATOR}: values.dcgmExporter.enabled is not true; GPUs would go unwatched"],
                 id="should deny the DCGM exporter disabled in the operator's values"),
    pytest.param(obs.DCGM_EXPORTER_ENABLED, {}, None, [], id="should admit the DCGM exporter enabled"),
    pytest.param(obs.DCGM_EXPORTER_ENABLED, {"gpu-operator": {"values__dcgmExporter": {}}}, None, [],
                 id="should admit the chart's default, which enables the exporter"),
    pytest.param(obs.DCGM_EXPORTER_ENABLED, {"gpu-operator": {"values__dcgmExporter__enabled": UNKNOWN_BOOLEAN_VALUE}},
                 None, [f"{OPERATOR}: values.dcgmExporter.enabled is unknown at preview; this policy fails closed"],
                 id="should deny a DCGM exporter flag unknown at preview"),
    pytest.param(obs.METRICS_HOT_RETENTION,
                 {"kube-prometheus-stack": {"values__prometheus__prometheusSpec__retention": "15d"}}, None,
                 [f"{PROMETHEUS}: Prometheus keeps 15 days of metrics, under 30"],
                 id="should deny hot retention under 30 days"),
    pytest.param(obs.METRICS_HOT_RETENTION, {"kube-prometheus-stack": {"values__prometheus__prometheusSpec": {}}},
                 None, [f"{PROMETHEUS}: Prometheus keeps 10 days of metrics, under 30"],
                 id="should deny the chart's default retention of 10 days"),
    pytest.param(obs.METRICS_HOT_RETENTION, {}, None, [], id="should admit hot retention of 30 days"),
    pytest.param(obs.METRICS_HOT_RETENTION, {}, {"min_days": 45},
                 [f"{PROMETHEUS}: Prometheus keeps 30 days of metrics, under 45"],
                 id="should deny hot retention under a tightened config"),
    pytest.param(obs.METRICS_HOT_RETENTION,
                 {"kube-prometheus-stack": {"values__prometheus__prometheusSpec__retention": UNKNOWN_STRING_VALUE}},
                 None, [f"{PROMETHEUS}: values.prometheus.prometheusSpec.retention is unknown at preview; this "
                        "policy fails closed"], id="should deny a retention unknown at preview"),
    pytest.param(obs.METRICS_COLD_TIER, {"victoria-metrics-single": {"values__server__retentionPeriod": "90d"},
                                         "kube-prometheus-stack": {"values__prometheus__prometheusSpec": {}}}, None,
                 [f"{COLD}: the cold tier keeps 90 days, under 365 and receives nothing: no "
                  f"prometheus.prometheusSpec.remoteWrite in {PROMETHEUS} reaches it"],
                 id="should deny a short cold tier that nothing writes to"),
    pytest.param(obs.METRICS_COLD_TIER, {"victoria-metrics-single": {"values__server": {}}}, None,
                 [f"{COLD}: the cold tier keeps 31 days, under 365"],
                 id="should deny the chart's default retention of one month"),
    pytest.param(obs.METRICS_COLD_TIER, {"victoria-metrics-single": {"values__server__retentionPeriod": "1y"}}, None,
                 [], id="should admit a year of cold tier fed by remote_write"),
    pytest.param(obs.METRICS_COLD_TIER, {"victoria-metrics-single": {"values__server__retentionPeriod": 12}}, None,
                 [], id="should admit twelve months given as a bare number"),
])
def test_deployed_monitoring(policy: StackValidationPolicy, changes: dict[str, dict[str, Any]],
                             config: dict[str, Any] | None, expected: list[str]) -> None:
    assert judge_releases(policy, changes, config) == expected


def test_should_deny_when_the_chart_that_deploys_it_is_missing() -> None:
    assert judge_releases(obs.DCGM_EXPORTER_ENABLED, {}, without="gpu-operator") == [
        "the stack installs 0 gpu-operator releases; the policy needs exactly one"]
