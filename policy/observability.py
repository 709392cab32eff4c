"""Observability first: one monitoring stack, fed by DCGM, keeping metrics long enough, alerting on idle and hot GPUs.

What is deployed is judged where it is deployed: the DCGM exporter, retention, remote_write and Alertmanager's
routes in the values of the Helm releases that install them (a chart's own default where a value is left out), the
alerts in the PrometheusRule resources, the dashboards in the ConfigMaps Grafana's sidecar loads (the contract is
in docs/policy.md). The numbers are policy config with the defaults below, so a stack's policy config can tighten
them.
"""

import json
import re
from collections.abc import Callable
from typing import Any

from common import (
    MONITORING_STACK_TYPE,
    ViolationError,
    config_number,
    describe,
    fact,
    of_type,
    present,
    report_each,
    text,
)
from pulumi_policy import (
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    StackValidation,
    StackValidationArgs,
    StackValidationPolicy,
)

HOT_RETENTION_DAYS = 30
COLD_RETENTION_DAYS = 365
GPU_IDLE_THRESHOLD_PCT = 30
GPU_IDLE_WINDOW_HOURS = 24
GPU_TEMP_THRESHOLD_C = 85
COST_DASHBOARD = "llm-cost"
RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
PROMETHEUS_RULE_TYPE = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"
CONFIGMAP_TYPE = "kubernetes:core/v1:ConfigMap"
DASHBOARD_LABEL = "grafana_dashboard"
"""kube-prometheus-stack's grafana.sidecar.dashboards.label default: the sidecar loads ConfigMaps carrying it."""
_MATCHER = re.compile(r'^\s*(?P<label>\w+)\s*(?P<op>=~|!~|!=|=)\s*"?(?P<value>.*?)"?\s*$')
GPU_OPERATOR_CHART = "gpu-operator"
PROMETHEUS_CHART = "kube-prometheus-stack"
COLD_TIER_CHART = "victoria-metrics-single"
CHART_DEFAULT_HOT_RETENTION = "10d"
"""kube-prometheus-stack's prometheus.prometheusSpec.retention when the values leave it out (values.yaml)."""
CHART_DEFAULT_COLD_RETENTION = "1"
"""victoria-metrics-single's server.retentionPeriod default: a bare number counts months (VictoriaMetrics docs)."""
_DURATION = re.compile(r"^(?P<count>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h|d|w|y)?$")
_DAYS = {"ms": 1 / 86_400_000, "s": 1 / 86_400, "m": 1 / 1440, "h": 1 / 24, "d": 1, "w": 7, "y": 365,
         "months": 31}
"""Days per unit; VictoriaMetrics counts a month as 31 days (lib/flagutil, retentionPeriod)."""

# The raw DCGM series, or a recording rule derived from it (`gpu:dcgm_gpu_util:max`), with optional matchers.
_UTIL_SERIES = r"(?:DCGM_FI_DEV_GPU_UTIL|gpu:dcgm_gpu_util[\w:]*)(?:\{[^}]*\})?"
_TEMP_SERIES = r"(?:DCGM_FI_DEV_GPU_TEMP|gpu:dcgm_gpu_temp[\w:]*)(?:\{[^}]*\})?"
_NUMBER = r"(?P<threshold>\d+(?:\.\d+)?)"
IDLE_EXPR = re.compile(rf"avg_over_time\(\s*{_UTIL_SERIES}\[(?P<window>\d+)(?P<unit>[hd])\]\s*\)\s*<=?\s*{_NUMBER}")
HOT_EXPR = re.compile(rf"{_TEMP_SERIES}[\s)]*>=?\s*{_NUMBER}")


def _schema(**properties: tuple[str, float]) -> PolicyConfigSchema:
    return PolicyConfigSchema(properties={
        key: {"type": "number", "description": description, "default": default}
        for key, (description, default) in properties.items()
    })


def per_stack(check: Callable[[StackValidationArgs, PolicyResource], None]) -> StackValidation:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        report_each(present(args, MONITORING_STACK_TYPE), report, lambda stack: check(args, stack))
    return validate


def per_release(chart: str, check: Callable[[StackValidationArgs, PolicyResource], None]) -> StackValidation:
    """Judge the chart's release and report against it; like the rest, only where a monitoring stack exists."""
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        if not present(args, MONITORING_STACK_TYPE):
            return
        try:
            judged = release(args, chart)
        except ViolationError as problem:
            report(str(problem), None)
            return
        report_each([judged], report, lambda r: check(args, r))
    return validate


def validate_present(args: StackValidationArgs, report: ReportViolation) -> None:
    stacks = of_type(args, MONITORING_STACK_TYPE)
    if not stacks:
        report(f"no monitoring stack: the stack registers no {MONITORING_STACK_TYPE} component", None)
    elif len(stacks) > 1:
        names = ", ".join(sorted(s.name for s in stacks))
        report(f"{len(stacks)} monitoring stacks ({names}); exactly one may exist", None)


def release(args: StackValidationArgs, chart: str) -> PolicyResource:
    """The one Helm release of a chart (named as in the repository, as an OCI reference's last part, or as the
    archive `<chart>-<version>.tgz` of a site's chart mirror folder)."""
    found = [r for r in of_type(args, RELEASE_TYPE) if text(r, "chart").rstrip("/").rsplit("/", 1)[-1]
             .removesuffix(f"-{fact(r, 'version', '')}.tgz") == chart]
    if len(found) != 1:
        raise ViolationError(f"the stack installs {len(found)} {chart} releases; the policy needs exactly one")
    return found[0]


def days(resource: PolicyResource, path: str, default: str, bare_unit: str) -> float:
    """A retention as days: a Prometheus duration (`30d`, `1y`), or a bare number in `bare_unit`."""
    value = str(fact(resource, path, default))
    match = _DURATION.match(value)
    if not match:
        raise ViolationError(f"{describe(resource)}: {path} is {value!r}, not a duration")
    unit = match["unit"] or bare_unit
    return float(match["count"]) * _DAYS[unit]


def check_dcgm(args: StackValidationArgs, operator: PolicyResource) -> None:
    # The chart enables the exporter unless its values say otherwise.
    if fact(operator, "values.dcgmExporter.enabled", True) is not True:
        raise ViolationError(f"{describe(operator)}: values.dcgmExporter.enabled is not true; GPUs would go "
                             "unwatched")


def check_hot_retention(args: StackValidationArgs, prometheus: PolicyResource) -> None:
    required = config_number(args, "min_days", HOT_RETENTION_DAYS)
    kept = days(prometheus, "values.prometheus.prometheusSpec.retention", CHART_DEFAULT_HOT_RETENTION, "d")
    if kept < required:
        raise ViolationError(f"{describe(prometheus)}: Prometheus keeps {kept:g} days of metrics, under {required:g}")


def check_cold_tier(args: StackValidationArgs, cold: PolicyResource) -> None:
    required = config_number(args, "min_days", COLD_RETENTION_DAYS)
    prometheus = release(args, PROMETHEUS_CHART)
    kept = days(cold, "values.server.retentionPeriod", CHART_DEFAULT_COLD_RETENTION, "months")
    # The chart's server Service is <release>-victoria-metrics-single-server (its templates' fullname).
    service = f"//{text(cold, 'name')}-{COLD_TIER_CHART}-server."
    writes = [w.get("url", "") for w in fact(prometheus, "values.prometheus.prometheusSpec.remoteWrite", [])
              if isinstance(w, dict)]
    faults = ([f"keeps {kept:g} days, under {required:g}"] if kept < required else []) + (
        [] if any(service in str(url) for url in writes) else
        [f"receives nothing: no prometheus.prometheusSpec.remoteWrite in {describe(prometheus)} reaches it"])
    if faults:
        raise ViolationError(f"{describe(cold)}: the cold tier {' and '.join(faults)}")


def _alert_exprs(args: StackValidationArgs) -> list[tuple[str, str]]:
    """(alert, expr) of every alerting rule in the PrometheusRule resources the stack deploys."""
    return [(str(rule.get("alert")), str(rule.get("expr", ""))) for resource in of_type(args, PROMETHEUS_RULE_TYPE)
            for group in fact(resource, "spec.groups", []) if isinstance(group, dict)
            for rule in group.get("rules", []) if isinstance(rule, dict) and "alert" in rule]


def check_idle_alert(args: StackValidationArgs, stack: PolicyResource) -> None:
    threshold = config_number(args, "threshold_pct", GPU_IDLE_THRESHOLD_PCT)
    window_h = config_number(args, "window_hours", GPU_IDLE_WINDOW_HOURS)
    seen = []
    for name, expr in _alert_exprs(args):
        for match in IDLE_EXPR.finditer(expr):
            hours = float(match["window"]) * (24 if match["unit"] == "d" else 1)
            fires_below = float(match["threshold"])
            if fires_below >= threshold and hours <= window_h:
                return
            seen.append(f"{name} fires under {fires_below:g} % over {hours:g} h")
    found = f"; found {', '.join(seen)}" if seen else ""
    raise ViolationError(
        f"no PrometheusRule alert averages DCGM_FI_DEV_GPU_UTIL (or a gpu:dcgm_gpu_util recording rule) "
        f"over at most {window_h:g} h and fires under at least {threshold:g} %{found}")


def check_hot_alert(args: StackValidationArgs, stack: PolicyResource) -> None:
    threshold = config_number(args, "threshold_c", GPU_TEMP_THRESHOLD_C)
    seen = []
    for name, expr in _alert_exprs(args):
        for match in HOT_EXPR.finditer(expr):
            fires_above = float(match["threshold"])
            if fires_above <= threshold:
                return
            seen.append(f"{name} fires over {fires_above:g} C")
    found = f"; found {', '.join(seen)}" if seen else ""
    raise ViolationError(
        f"no PrometheusRule alert fires when DCGM_FI_DEV_GPU_TEMP (or a gpu:dcgm_gpu_temp recording rule) "
        f"is > {threshold:g} C{found}")


def _matches(route: dict[str, Any], labels: dict[str, str]) -> bool:
    """Alertmanager's route matching: matchers, and the older match / match_re maps; a missing label is ""."""
    tests = [(m["label"], m["op"], m["value"]) for m in map(_MATCHER.match, route.get("matchers", [])) if m]
    if len(tests) != len(route.get("matchers", [])):
        return False  # a matcher we cannot read never counts as routing the alert
    tests += [(k, "=", str(v)) for k, v in (route.get("match") or {}).items()]
    tests += [(k, "=~", str(v)) for k, v in (route.get("match_re") or {}).items()]
    ops: dict[str, Callable[[str, str], bool]] = {
        "=": lambda a, b: a == b, "!=": lambda a, b: a != b,
        "=~": lambda a, b: re.fullmatch(b, a) is not None, "!~": lambda a, b: re.fullmatch(b, a) is None}
    return all(ops[op](labels.get(label, ""), value) for label, op, value in tests)


def receivers_of(route: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """The receivers an alert with `labels` reaches: the first matching child routes (more while they say continue),
    recursively, or the route's own receiver when no child matches."""
    reached: list[str] = []
    for child in route.get("routes", []):
        if isinstance(child, dict) and _matches(child, labels):
            reached += receivers_of({"receiver": route.get("receiver"), **child}, labels)
            if not child.get("continue"):
                break
    return reached or [str(route.get("receiver"))]


def check_critical_receiver(args: StackValidationArgs, prometheus: PolicyResource) -> None:
    config = fact(prometheus, "values.alertmanager.config", {})
    notifying = {r.get("name") for r in config.get("receivers", []) if isinstance(r, dict) and any(
        key.endswith("_configs") and value for key, value in r.items())}
    reached = receivers_of(config.get("route") or {}, {"severity": "critical"})
    if not notifying & set(reached):
        raise ViolationError(f"{describe(prometheus)}: a critical alert reaches {', '.join(reached)} in "
                             "values.alertmanager.config, none of which notifies anyone")


def _dashboard_uids(args: StackValidationArgs) -> list[str]:
    uids = []
    for configmap in of_type(args, CONFIGMAP_TYPE):
        if DASHBOARD_LABEL in (fact(configmap, "metadata.labels", {}) or {}):
            for body in (fact(configmap, "data", {}) or {}).values():
                try:
                    uids.append(str(json.loads(body).get("uid")))
                except (ValueError, AttributeError):
                    continue
    return uids


def check_cost_dashboard(args: StackValidationArgs, stack: PolicyResource) -> None:
    uids = _dashboard_uids(args)
    if COST_DASHBOARD not in uids:
        raise ViolationError(f"no ConfigMap labelled {DASHBOARD_LABEL} holds the {COST_DASHBOARD!r} dashboard "
                             f"(found {', '.join(sorted(uids)) or 'none'})")


MONITORING_STACK_PRESENT = StackValidationPolicy(
    name="monitoring-stack-present",
    description="Exactly one monitoring stack exists.",
    validate=validate_present,
)
DCGM_EXPORTER_ENABLED = StackValidationPolicy(
    name="dcgm-exporter-enabled",
    description="The monitoring stack runs the DCGM exporter on every GPU node.",
    validate=per_release(GPU_OPERATOR_CHART, check_dcgm),
)
METRICS_HOT_RETENTION = StackValidationPolicy(
    name="metrics-hot-retention",
    description=f"Prometheus keeps at least {HOT_RETENTION_DAYS} days of metrics (config min_days).",
    validate=per_release(PROMETHEUS_CHART, check_hot_retention),
    config_schema=_schema(min_days=("days Prometheus must keep", HOT_RETENTION_DAYS)),
)
METRICS_COLD_TIER = StackValidationPolicy(
    name="metrics-cold-tier",
    description=f"A cold tier fed by remote_write keeps at least {COLD_RETENTION_DAYS} days (config min_days).",
    validate=per_release(COLD_TIER_CHART, check_cold_tier),
    config_schema=_schema(min_days=("days the cold tier must keep", COLD_RETENTION_DAYS)),
)
GPU_IDLE_ALERT = StackValidationPolicy(
    name="gpu-idle-alert",
    description=f"An alert fires on GPUs averaging under {GPU_IDLE_THRESHOLD_PCT} % utilization "
                f"over {GPU_IDLE_WINDOW_HOURS} h.",
    validate=per_stack(check_idle_alert),
    config_schema=_schema(
        threshold_pct=("the alert must fire at or above this average utilization, %", GPU_IDLE_THRESHOLD_PCT),
        window_hours=("the averaging window may be at most this long, hours", GPU_IDLE_WINDOW_HOURS),
    ),
)
GPU_TEMPERATURE_ALERT = StackValidationPolicy(
    name="gpu-temperature-alert",
    description=f"An alert fires on any GPU hotter than {GPU_TEMP_THRESHOLD_C} C.",
    validate=per_stack(check_hot_alert),
    config_schema=_schema(threshold_c=("the alert must fire at or below this GPU temperature, C",
                                       GPU_TEMP_THRESHOLD_C)),
)
CRITICAL_ALERTS_ROUTED = StackValidationPolicy(
    name="critical-alerts-routed",
    description="Alertmanager routes critical alerts to at least one receiver.",
    validate=per_release(PROMETHEUS_CHART, check_critical_receiver),
)
LLM_COST_DASHBOARD = StackValidationPolicy(
    name="llm-cost-dashboard",
    description=f"The monitoring stack ships the {COST_DASHBOARD!r} dashboard.",
    validate=per_stack(check_cost_dashboard),
)

POLICIES = [MONITORING_STACK_PRESENT, DCGM_EXPORTER_ENABLED, METRICS_HOT_RETENTION, METRICS_COLD_TIER,
            GPU_IDLE_ALERT, GPU_TEMPERATURE_ALERT, CRITICAL_ALERTS_ROUTED, LLM_COST_DASHBOARD]
