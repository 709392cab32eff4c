"""Observability policies on a monitoring-stack fixture that follows the contract in docs/policy.md."""

import json
from typing import Any

import observability as obs
import pytest
from common import MONITORING_STACK_TYPE
from pulumi_policy import PolicyResource, StackValidationPolicy
from pulumi_policy.proxy import UNKNOWN_ARRAY_VALUE, UNKNOWN_BOOLEAN_VALUE, UNKNOWN_STRING_VALUE

from tests.policy.builders import changed, judge_stack, resource

IDLE = {"alert": "GpuUtilizationLow", "labels": {"severity": "tuning"},
        "expr": "avg_over_time(gpu:dcgm_gpu_util:max[24h]) < 30\n"
                "and on (Hostname, gpu) (gpu:dcgm_gpu_util:max offset 24h)"}
HOT = {"alert": "GpuTemperatureHigh", "expr": "gpu:dcgm_gpu_temp:max > 85", "for": "2m",
       "labels": {"severity": "critical"}}
MONITORING: dict[str, Any] = {}
SLACK = {"name": "incident", "slack_configs": [{"channel": "#gpu-incidents"}]}
ALERTMANAGER: dict[str, Any] = {
    "route": {"receiver": "platform", "routes": [
        {"receiver": "heartbeat", "matchers": ['alertname="Watchdog"']},
        {"receiver": "oncall", "matchers": ['severity="critical"'], "continue": True},
        {"receiver": "incident", "matchers": ['severity="critical"']}]},
    "receivers": [{"name": "platform", "slack_configs": [{"channel": "#gpu-platform"}]},
                  {"name": "heartbeat", "webhook_configs": [{"url": "https://hb.example"}]},
                  {"name": "oncall", "webhook_configs": [{"url": "https://pager.example"}]}, SLACK],
}


def rules(*alerts: dict[str, Any]) -> PolicyResource:
    return resource(obs.PROMETHEUS_RULE_TYPE, "prod-monitoring-gpu-rules",
                    {"spec": {"groups": [{"name": "gpu", "rules": list(alerts)}]}})


def dashboard(uid: str, label: str = obs.DASHBOARD_LABEL) -> PolicyResource:
    return resource(obs.CONFIGMAP_TYPE, f"prod-monitoring-grafana-dashboard-{uid}",
                    {"metadata": {"labels": {label: "1"}}, "data": {f"{uid}.json": json.dumps({"uid": uid})}})


def alertmanager(config: dict[str, Any]) -> PolicyResource:
    return resource("kubernetes:helm.sh/v3:Release", "prod-kube-prometheus-stack",
                    {"chart": "kube-prometheus-stack", "values": {"alertmanager": {"config": config}}})


DEPLOYED = (rules(IDLE, HOT), dashboard("gpu-fleet"), dashboard("llm-cost"), alertmanager(ALERTMANAGER))


def judge(policy: StackValidationPolicy, *deployed: PolicyResource, config: dict[str, Any] | None = None) -> list[str]:
    return judge_stack(policy, resource(MONITORING_STACK_TYPE, "prod-monitoring", MONITORING), *deployed,
                       config=config).messages


def alerts(*exprs: str) -> PolicyResource:
    return rules(*({"alert": f"Rule{i}", "expr": e, "labels": {"severity": "warning"}} for i, e in enumerate(exprs)))


NO_IDLE = ("no PrometheusRule alert averages DCGM_FI_DEV_GPU_UTIL (or a gpu:dcgm_gpu_util recording rule) over at "
           "most 24 h and fires under at least 30 %")
NO_HOT = "no PrometheusRule alert fires when DCGM_FI_DEV_GPU_TEMP (or a gpu:dcgm_gpu_temp recording rule) is > 85 C"
AM = "Release prod-kube-prometheus-stack"


def without_route(receiver: str) -> dict[str, Any]:
    routes = [r for r in ALERTMANAGER["route"]["routes"] if r["receiver"] != receiver]
    return {**ALERTMANAGER, "route": {**ALERTMANAGER["route"], "routes": routes}}


@pytest.mark.parametrize(("policy", "deployed", "config", "expected"), [
    pytest.param(obs.GPU_IDLE_ALERT, DEPLOYED, None, [], id="should admit the idle alert on the recorded series"),
    pytest.param(obs.GPU_IDLE_ALERT, (alerts("avg_over_time(DCGM_FI_DEV_GPU_UTIL{pool=\"slurm\"}[1d]) <= 30"),),
                 None, [], id="should admit the idle alert on the raw DCGM series over 1d"),
    pytest.param(obs.GPU_IDLE_ALERT, (alerts("avg_over_time(gpu:dcgm_gpu_util:max[24h]) < 20"),), None,
                 [f"{NO_IDLE}; found Rule0 fires under 20 % over 24 h"],
                 id="should deny an idle alert under a lower threshold"),
    pytest.param(obs.GPU_IDLE_ALERT, (alerts("avg_over_time(DCGM_FI_DEV_GPU_UTIL[48h]) < 30"),), None,
                 [f"{NO_IDLE}; found Rule0 fires under 30 % over 48 h"],
                 id="should deny an idle alert over a longer window"),
    pytest.param(obs.GPU_IDLE_ALERT, (alerts("DCGM_FI_DEV_GPU_UTIL < 30"),), None, [NO_IDLE],
                 id="should deny an idle alert that does not average"),
    pytest.param(obs.GPU_IDLE_ALERT, (), None, [NO_IDLE], id="should deny a stack without PrometheusRules"),
    pytest.param(obs.GPU_IDLE_ALERT, DEPLOYED, {"threshold_pct": 40},
                 ["no PrometheusRule alert averages DCGM_FI_DEV_GPU_UTIL (or a gpu:dcgm_gpu_util recording rule) "
                  "over at most 24 h and fires under at least 40 %; found GpuUtilizationLow fires under 30 % over "
                  "24 h"], id="should deny the idle alert under a tightened threshold"),
    pytest.param(obs.GPU_IDLE_ALERT, (resource(obs.PROMETHEUS_RULE_TYPE, "rules", {"spec": {
        "groups": UNKNOWN_ARRAY_VALUE}}),), None,
                 ["PrometheusRule rules: spec.groups is unknown at preview; this policy fails closed"],
                 id="should deny rules unknown at preview"),
    pytest.param(obs.GPU_TEMPERATURE_ALERT, DEPLOYED, None, [], id="should admit a temperature alert over 85 C"),
    pytest.param(obs.GPU_TEMPERATURE_ALERT, (alerts("max by (Hostname) (DCGM_FI_DEV_GPU_TEMP) > 85"),), None, [],
                 id="should admit a temperature alert on the raw DCGM series"),
    pytest.param(obs.GPU_TEMPERATURE_ALERT, (alerts("gpu:dcgm_gpu_temp:max > 90"),), None,
                 [f"{NO_HOT}; found Rule0 fires over 90 C"], id="should deny a temperature alert over 90 C"),
    pytest.param(obs.GPU_TEMPERATURE_ALERT, (alerts("gpu:dcgm_memory_temp:max > 85"),), None, [NO_HOT],
                 id="should deny a memory temperature alert standing in for the GPU's"),
    pytest.param(obs.GPU_TEMPERATURE_ALERT, DEPLOYED, {"threshold_c": 80},
                 ["no PrometheusRule alert fires when DCGM_FI_DEV_GPU_TEMP (or a gpu:dcgm_gpu_temp recording rule) "
                  "is > 80 C; found GpuTemperatureHigh fires over 85 C"],
                 id="should deny the temperature alert under a tightened threshold"),
    pytest.param(obs.CRITICAL_ALERTS_ROUTED, DEPLOYED, None, [], id="should admit critical alerts paged and posted"),
    pytest.param(obs.CRITICAL_ALERTS_ROUTED, (alertmanager(without_route("oncall")),), None, [],
                 id="should admit critical alerts reaching one notifying receiver"),
    pytest.param(obs.CRITICAL_ALERTS_ROUTED, (alertmanager({**ALERTMANAGER, "receivers": [
        r for r in ALERTMANAGER["receivers"] if r["name"] not in ("oncall", "incident")] + [
        {"name": "oncall"}, {"name": "incident", "slack_configs": []}]}),), None,
                 [f"{AM}: a critical alert reaches oncall, incident in values.alertmanager.config, none of which "
                  "notifies anyone"], id="should deny critical alerts routed to receivers that notify no one"),
    pytest.param(obs.CRITICAL_ALERTS_ROUTED, (alertmanager({**without_route("oncall"), "route": {
        **without_route("oncall")["route"], "receiver": "null", "routes": [
            {"receiver": "heartbeat", "matchers": ['alertname="Watchdog"']}]}, "receivers": [{"name": "null"}]}),),
                 None, [f"{AM}: a critical alert reaches null in values.alertmanager.config, none of which notifies "
                        "anyone"], id="should deny critical alerts falling to a null root receiver"),
    pytest.param(obs.LLM_COST_DASHBOARD, (dashboard("gpu-fleet"), dashboard("llm-cost", label="other")), None,
                 ["no ConfigMap labelled grafana_dashboard holds the 'llm-cost' dashboard (found gpu-fleet)"],
                 id="should deny a cost dashboard Grafana's sidecar never loads"),
    pytest.param(obs.LLM_COST_DASHBOARD, DEPLOYED, None, [], id="should admit the llm-cost dashboard"),
])
def test_monitoring_rules(policy: StackValidationPolicy, deployed: tuple[PolicyResource, ...],
                          config: dict[str, Any] | None, expected: list[str]) -> None:
    assert judge(policy, *deployed, config=config) == expected


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
    pytest.param(obs.DCGM_EXPORTER_ENABLED, {"gpu-operator": {
        "chart": "/srv/charts/gpu-operator-v25.10.1.tgz", "version": "v25.10.1",
        "values__dcgmExporter__enabled": False}}, None,
        [f"{OPERATOR}: values.dcgmExporter.enabled is not true; GPUs would go unwatched"],
        id="should judge the release of a chart the site mirrors as an archive"),
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
