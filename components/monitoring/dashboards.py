"""Grafana dashboards from the site spec (grafana-foundation-sdk), and the ConfigMaps that ship them.

Pure: `render_dashboards` gives each dashboard's JSON model keyed by uid; `dashboard_configmaps` wraps
each in a ConfigMap that the Grafana sidecar of kube-prometheus-stack loads (label `grafana_dashboard: "1"`,
the chart's `grafana.sidecar.dashboards.label`/`labelValue` defaults).

Panels read the recorded per-GPU and LLM cost series of `components.monitoring.alerts`, so a dashboard shows
what the alerts judge. Memory used and power have no recorded series yet; they read the raw DCGM field
with the same per-GPU collapse.

Rack and pool are not labels on any metric: dcgm-exporter names the node (`Hostname`) only. Both come
from the spec as nested `label_replace` calls, one per rack or pool matching its nodes' hostnames, so
the mapping changes with the spec and needs no extra series or relabelling.

Panel ids are written out (stable links such as `viewPanel=`, and stable diffs); refIds are A, B, ...
in target order.
"""

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from string import ascii_uppercase
from typing import Any

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus as prometheus_builders
from grafana_foundation_sdk.builders import stat, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dashboard_models
from grafana_foundation_sdk.models import prometheus as prometheus_models

from components.monitoring import health_metrics
from components.monitoring.alerts import GPU, GPU_MATCH, KSM_FLEX_LENT, UNATTRIBUTED, Record, llm_cost_rules
from components.site.derived import once_per_site
from components.site.site import Pool, Site
from components.site.wellknown import MONITORING_NAMESPACE

NAMESPACE = MONITORING_NAMESPACE
"""Namespace of the ConfigMaps: Grafana's own, where the sidecar looks unless `searchNamespace` widens it."""

SIDECAR_LABEL = "grafana_dashboard"
SIDECAR_LABEL_VALUE = "1"
"""kube-prometheus-stack's `grafana.sidecar.dashboards.label` and `labelValue` defaults."""

FOLDER_ANNOTATION = "grafana_folder"
"""Annotation naming the Grafana folder; the chart needs `grafana.sidecar.dashboards.folderAnnotation` set to
it and `provider.foldersFromFilesStructure: true` (both off by default)."""

PLATFORM_FOLDER = "gpu-platform"
TEAMS_FOLDER = "gpu-teams"

FLEET_UID = "gpu-fleet"
POOLS_UID = "pools"
TEAM_USAGE_UID = "team-usage"
LLM_COST_UID = "llm-cost"
INFERENCE_UID = "inference"
"""A policy checks that the LLM cost dashboard exists under exactly this uid."""

DATASOURCE_VARIABLE = "datasource"
DATASOURCE = dashboard_models.DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VARIABLE}}}")

ALL = ".*"
"""What a variable's "All" stands for in a regex matcher: any value, including hosts outside the spec."""

RANGE_STEP_MINUTES = 1
"""Subquery step when a rate (per hour) is summed over the dashboard's range into an amount."""

REFRESH = "1m"
"""The rule evaluation interval: refreshing faster shows nothing new."""


def _select(metric: str, matcher: str) -> str:
    return f"{metric}{{{matcher}}}" if matcher else metric


def _gpu_collapse(metric: str, matcher: str) -> str:
    # Same collapse as the recording rules: one series per physical GPU whatever its tenant labels.
    return f"max by ({', '.join(GPU)}) ({_select(metric, matcher)})"


def _label_by_hostname(expr: str, label: str, members: dict[str, list[str]]) -> str:
    """expr's series with `label` set from their Hostname: one label_replace per value, nested.

    label_replace passes a series whose Hostname does not match unchanged, so nesting assigns each node
    once; hosts outside the spec keep an empty label. Node names are DNS labels: nothing to escape.
    """
    for value, nodes in members.items():
        expr = f'label_replace({expr}, "{label}", "{value}", "Hostname", "{"|".join(nodes)}")'
    return expr


def _racks(site: Site) -> dict[str, list[str]]:
    members: dict[str, list[str]] = {}
    for node in (n for g in site.node_groups for n in g.nodes):
        members.setdefault(node.rack, []).append(node.name)
    return members


def _pools(site: Site) -> dict[str, list[str]]:
    members = {p.value: [n.name for g in site.node_groups if g.pool == p for n in g.nodes] for p in Pool}
    return {pool: nodes for pool, nodes in members.items() if nodes}


def _pool_gpus(site: Site) -> dict[str, int]:
    return {p.value: sum(g.gpus_per_node * len(g.nodes) for g in site.node_groups if g.pool == p) for p in Pool}


def _amount_in_range(per_hour: str) -> str:
    """The integral over the dashboard's range of a rate per hour (GPUs -> GPU-hours, USD/h -> USD)."""
    return f"sum_over_time(({per_hour})[$__range:{RANGE_STEP_MINUTES}m]) / {60 // RANGE_STEP_MINUTES}"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str
    instant: bool = False


def _target(ref_id: str, query: Query) -> prometheus_builders.Dataquery:
    target = (prometheus_builders.Dataquery().ref_id(ref_id).expr(query.expr).legend_format(query.legend)
              .datasource(DATASOURCE))
    return target.instant() if query.instant else target.range()


def _targets(queries: Sequence[Query]) -> list[cogbuilder.Builder[Any]]:
    return [_target(ascii_uppercase[i], query) for i, query in enumerate(queries)]


def _thresholds(red_at: float | None) -> dashboard_builders.ThresholdsConfig:
    steps = [dashboard_models.Threshold(value=None, color="green")]
    if red_at is not None:
        steps.append(dashboard_models.Threshold(value=red_at, color="red"))
    return dashboard_builders.ThresholdsConfig().mode(dashboard_models.ThresholdsMode.ABSOLUTE).steps(steps)


def _timeseries(panel_id: int, title: str, unit: str, queries: Sequence[Query], description: str = "",
                red_at: float | None = None) -> timeseries.Panel:
    panel = (timeseries.Panel().id(panel_id).title(title).description(description).unit(unit)
             .datasource(DATASOURCE).targets(_targets(queries)).span(12).height(8)
             .thresholds(_thresholds(red_at))
             .legend(common_builders.VizLegendOptions().show_legend(True)
                     .display_mode(common.LegendDisplayMode.TABLE).placement(common.LegendPlacement.RIGHT)
                     .calcs(["lastNotNull", "max"])))
    if red_at is not None:
        panel = panel.thresholds_style(common_builders.GraphThresholdsStyleConfig()
                                       .mode(common.GraphThresholdsStyleMode.LINE))
    return panel


def _stat(panel_id: int, title: str, unit: str, queries: Sequence[Query], description: str = "") -> stat.Panel:
    return (stat.Panel().id(panel_id).title(title).description(description).unit(unit).datasource(DATASOURCE)
            .targets(_targets(queries)).span(12).height(8).thresholds(_thresholds(None))
            .graph_mode(common.BigValueGraphMode.NONE)
            .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"])))


def _table(panel_id: int, title: str, unit: str, query: Query, description: str = "") -> table.Panel:
    target = _target("A", query).format(prometheus_models.PromQueryFormat.TABLE)
    return (table.Panel().id(panel_id).title(title).description(description).unit(unit).datasource(DATASOURCE)
            .targets([target]).span(24).height(10).thresholds(_thresholds(None))
            # One row per series: hide the timestamp column an instant table query brings.
            .with_transformation(dashboard_models.DataTransformerConfig(
                id_val="organize", options={"excludeByName": {"Time": True}})))


def _custom_variable(name: str, label: str, values: list[str]) -> dashboard_builders.CustomVariable:
    return (dashboard_builders.CustomVariable(name).label(label).values(",".join(values))
            .multi(True).include_all(True).all_value(ALL)
            .current(dashboard_models.VariableOption(selected=True, text=["All"], value=["$__all"])))


def _board(uid: str, title: str, description: str) -> dashboard_builders.Dashboard:
    return (dashboard_builders.Dashboard(title).uid(uid).description(description).tags(["gpu-cluster"])
            .time("now-6h", "now").refresh(REFRESH).timezone("browser").editable()
            .tooltip(dashboard_models.DashboardCursorSync.CROSSHAIR)
            .with_variable(dashboard_builders.DatasourceVariable(DATASOURCE_VARIABLE).label("Data source")
                           .type("prometheus")))


@dataclass(frozen=True)
class FleetMetric:
    """One GPU quantity shown per GPU, per node and per rack."""

    ordinal: int
    """Position in each row; a panel's id is its row's id plus this, so ids survive appending a metric."""
    title: str
    unit: str
    series: str
    recorded: bool
    """Whether `series` is a recorded per-GPU series or a raw DCGM field still to be collapsed per GPU."""
    aggregate: str
    """How GPUs add up to a node or rack: avg (a share), sum (an amount) or max (the hottest)."""
    red_at: float | None = None

    def per_gpu(self, matcher: str) -> str:
        return _select(self.series, matcher) if self.recorded else _gpu_collapse(self.series, matcher)


@dataclass(frozen=True)
class FleetLevel:
    row_id: int
    title: str
    by: str
    """The label GPUs are grouped by; empty for one series per GPU."""
    description: str


NODE_MATCHER = 'Hostname=~"$node"'

FLEET_LEVELS = (
    FleetLevel(1, "Per GPU", "", "One series per GPU of the selected nodes."),
    FleetLevel(10, "Per node", "Hostname", "The GPUs of each selected node: mean utilization, summed memory and "
               "power, the hottest GPU."),
    FleetLevel(20, "Per rack", "rack", "Every rack (the node filter does not apply), racks from the site spec; "
               "a host outside the spec shows under an empty rack."),
)


def _fleet_metrics(site: Site) -> list[FleetMetric]:
    return [
        FleetMetric(1, "Utilization", "percent", Record.GPU_UTIL, True, "avg"),
        FleetMetric(2, "Memory used", "mbytes", "DCGM_FI_DEV_FB_USED", False, "sum"),
        FleetMetric(3, "Temperature", "celsius", Record.GPU_TEMP, True, "max", site.monitoring.gpu_temp_incident_c),
        FleetMetric(4, "HBM temperature", "celsius", Record.MEMORY_TEMP, True, "max",
                    site.alerting.hbm_temp_incident_c),
        FleetMetric(5, "Power", "watt", "DCGM_FI_DEV_POWER_USAGE", False, "sum"),
    ]


def _fleet_query(site: Site, level: FleetLevel, metric: FleetMetric) -> Query:
    if level.by == "rack":
        racks = _label_by_hostname(metric.per_gpu(""), "rack", _racks(site))
        return Query(f"{metric.aggregate} by (rack) ({racks})", "{{rack}}")
    if level.by:
        return Query(f"{metric.aggregate} by ({level.by}) ({metric.per_gpu(NODE_MATCHER)})", f"{{{{{level.by}}}}}")
    return Query(metric.per_gpu(NODE_MATCHER), "{{Hostname}} GPU {{gpu}}")


def _gpu_fleet(site: Site) -> dashboard_builders.Dashboard:
    board = _board(FLEET_UID, "GPU fleet", "Utilization, memory, temperatures and power of every GPU, by GPU, "
                   "node and rack.")
    board = board.with_variable(_custom_variable("node", "Node", [n.name for g in site.node_groups for n in g.nodes]))
    for level in FLEET_LEVELS:
        board = board.with_row(dashboard_builders.Row(level.title).id(level.row_id))
        for metric in _fleet_metrics(site):
            title = f"{metric.title} {level.title[0].lower()}{level.title[1:]}"
            board = board.with_panel(_timeseries(level.row_id + metric.ordinal, title, metric.unit,
                                                 [_fleet_query(site, level, metric)], level.description, metric.red_at))
    return board


def _owned(per_gpu: str, team_matcher: str) -> str:
    """per_gpu's series labelled with the team using the GPU; GPUs no team of the matcher uses drop out."""
    return f"{per_gpu} * on ({GPU_MATCH}) group_left (team) {Record.OWNER}{{{team_matcher}}}"


TEAM_MATCHER = 'team=~"$team"'


def _team_usage(site: Site) -> dashboard_builders.Dashboard:
    board = _board(TEAM_USAGE_UID, "GPU usage by team",
                   "GPUs each team holds and how hard it drives them. A GPU belongs to the team whose namespace "
                   "its pod runs in (Kubernetes) or whose Slurm account its job runs under.")
    board = board.with_variable(_custom_variable("team", "Team", [t.name for t in site.teams]))
    in_use = f"count by (team) ({Record.OWNER}{{{TEAM_MATCHER}}})"
    memory = _gpu_collapse("DCGM_FI_DEV_FB_USED", "")
    return (board
            .with_panel(_timeseries(1, "GPUs in use", "short", [Query(in_use, "{{team}}")]))
            .with_panel(_timeseries(2, "Mean utilization of the team's GPUs", "percent", [
                Query(f"avg by (team) ({_owned(Record.GPU_UTIL, TEAM_MATCHER)})", "{{team}}")],
                f"Under {site.monitoring.gpu_util_low_pct:g} % for {site.monitoring.gpu_util_low_window_h} h "
                "raises a tuning alert per GPU."))
            .with_panel(_timeseries(3, "GPU memory used", "mbytes", [
                Query(f"sum by (team) ({_owned(memory, TEAM_MATCHER)})", "{{team}}")]))
            .with_panel(_stat(4, "GPU-hours in the time range", "short", [
                Query(_amount_in_range(in_use), "{{team}}", instant=True)])))


def _pool_capacity(site: Site) -> str:
    # The spec's GPU count per pool as constant series, so capacity sits beside what is reporting.
    return " or ".join(f'label_replace(vector({gpus}), "pool", "{pool}", "", "")'
                       for pool, gpus in _pool_gpus(site).items() if gpus)


def _pools_board(site: Site) -> dashboard_builders.Dashboard:
    board = _board(POOLS_UID, "GPU pools",
                   "Slurm (training), Kubernetes (inference) and flex (Slurm by default, lent to Kubernetes at a "
                   "peak) pools; a GPU's pool is its node's node group in the site spec.")
    pools = _pools(site)
    reporting = f"count by (pool) ({_label_by_hostname(Record.GPU_TEMP, 'pool', pools)})"
    in_use = f"count by (pool) ({_label_by_hostname(Record.OWNER, 'pool', pools)})"
    capacity = Query(_pool_capacity(site), "{{pool}}", instant=True)
    return (board
            .with_panel(_stat(1, "GPUs per pool (spec)", "short", [capacity]))
            .with_panel(_timeseries(2, "GPUs reporting", "short", [Query(reporting, "{{pool}}")],
                                    "Fewer than the spec: a GPU, node or exporter is missing."))
            .with_panel(_timeseries(3, "GPUs in use by a team", "short", [Query(in_use, "{{pool}}")]))
            .with_panel(_timeseries(4, "Share of the pool's GPUs in use", "percentunit", [
                Query(f"{in_use} / on (pool) ({_pool_capacity(site)})", "{{pool}}")]))
            .with_panel(_timeseries(5, "Mean utilization", "percent", [
                Query(f"avg by (pool) ({_label_by_hostname(Record.GPU_UTIL, 'pool', pools)})", "{{pool}}")]))
            .with_panel(_timeseries(6, "Flex nodes lent to inference", "short", [
                Query(f'count(kube_node_labels{{{KSM_FLEX_LENT}="true"}}) or vector(0)', "lent")],
                                    "Set by gpuctl flex lend, cleared by gpuctl flex reclaim."))
            # The node health controller (runbooks/health): what it holds, what it did, what waits for its budget.
            .with_panel(_timeseries(7, "Nodes held by the health controller", "short", [
                Query(f"count by (phase) ({health_metrics.NODE_PHASE})", "{{phase}}")],
                                    "Drained and cordoned on a DCGM finding (suspect: draining, diagnosing or about "
                                    "to return) or handed to a human after repeated failures."))
            .with_panel(_timeseries(8, "Health controller moves per hour", "short", [
                Query(f"sum by (action) (increase({health_metrics.ACTIONS}[1h]))", "{{action}}")],
                                    "Drains, diagnoses, returns and hand-offs carried out."))
            .with_panel(_timeseries(9, "Suspect nodes waiting for the drain budget", "short", [
                Query(health_metrics.BUDGET_WAITING, "waiting")],
                                    "Nodes with a finding left in service because health.max_drained_pct of the GPU "
                                    "nodes are already held.")))


def token_types(site: Site) -> list[str]:
    """Token types the LLM cost rules price, in rule order (prompt, completion)."""
    return list(dict.fromkeys(r["labels"]["token_type"] for r in llm_cost_rules(site) if r["record"] == Record.TOKENS))


def _llm_cost(site: Site) -> dashboard_builders.Dashboard:
    board = _board(LLM_COST_UID, "LLM API cost",
                   "Cost of LLM API traffic per team, model and token type: the token rates the LLM gateway counts for "
                   "each team's keys, times the price table of the spec (inference: external APIs at their "
                   "providers' prices, served models at their GPU-hour cost), averaged over the last hour.")
    board = board.with_variable(_custom_variable("team", "Team", [t.name for t in site.teams]))
    cost = f"{Record.COST}{{{TEAM_MATCHER}}}"
    by_type = [Query(f'sum ({Record.COST}{{{TEAM_MATCHER}, token_type="{t}"}})', t) for t in token_types(site)]
    return (board
            .with_panel(_timeseries(1, "Cost per team (USD/h)", "currencyUSD", [
                Query(f"{Record.TEAM_COST}{{{TEAM_MATCHER}}}", "{{team}}")]))
            .with_panel(_timeseries(2, "Cost per model (USD/h)", "currencyUSD", [
                Query(f"sum by (model) ({cost})", "{{model}}")]))
            # One target per token type, so each type keeps its own legend and colour.
            .with_panel(_timeseries(3, "Cost per token type (USD/h)", "currencyUSD", by_type))
            .with_panel(_timeseries(4, "Tokens per second", "short", [
                Query(f"sum by (team, token_type) ({Record.TOKENS}{{{TEAM_MATCHER}}})", "{{team}} {{token_type}}")]))
            .with_panel(_table(5, "Cost in the time range (USD)", "currencyUSD", Query(
                _amount_in_range(f"sum by (team, model, token_type) ({cost})"), "", instant=True))))


def _latency(histogram: str) -> str:
    return f"histogram_quantile(0.95, sum by (le, model_name) (rate({histogram}_bucket[$__rate_interval])))"


def _inference(site: Site) -> dashboard_builders.Dashboard:
    board = _board(INFERENCE_UID, "Inference serving",
                   "The served models' queues and latency (vLLM engines, label model_name) and the gateway's "
                   "requests and errors per model (LiteLLM, requests its keys authenticated).")
    team_traffic = f'team_alias!="{UNATTRIBUTED}"'
    requests = f"sum by (requested_model) (rate(litellm_proxy_total_requests_metric_total{{{team_traffic}}}[5m]))"
    failed = (f'sum by (requested_model) (rate(litellm_proxy_failed_requests_metric_total{{{team_traffic}, '
              f'exception_status!~"4.."}}[5m]))')
    return (board
            .with_panel(_timeseries(1, "Requests waiting per model", "short", [
                Query("sum by (model_name) (vllm:num_requests_waiting)", "{{model_name}}")],
                "The autoscaler's signal: past inference.models[].waiting_per_replica per replica, KEDA adds one."))
            .with_panel(_timeseries(2, "Requests running per model", "short", [
                Query("sum by (model_name) (vllm:num_requests_running)", "{{model_name}}")]))
            .with_panel(_timeseries(3, "End-to-end latency p95 (s)", "s", [
                Query(_latency("vllm:e2e_request_latency_seconds"), "{{model_name}}")]))
            .with_panel(_timeseries(4, "Time to first token p95 (s)", "s", [
                Query(_latency("vllm:time_to_first_token_seconds"), "{{model_name}}")]))
            .with_panel(_timeseries(5, "Gateway requests per second", "reqps", [
                Query(requests, "{{requested_model}}")]))
            .with_panel(_timeseries(6, "Gateway errors (share of requests)", "percentunit", [
                Query(f"{failed} / {requests}", "{{requested_model}}")],
                "Server-side failures; client errors (4xx, budgets) are the caller's.")))


FOLDERS = {
    FLEET_UID: PLATFORM_FOLDER,
    POOLS_UID: PLATFORM_FOLDER,
    TEAM_USAGE_UID: TEAMS_FOLDER,
    LLM_COST_UID: TEAMS_FOLDER,
    INFERENCE_UID: PLATFORM_FOLDER,
}
"""The Grafana folder of each dashboard: the platform team's, or the one every team reads."""

BUILDERS = (_gpu_fleet, _pools_board, _team_usage, _llm_cost, _inference)


@once_per_site
def render_dashboards(site: Site) -> dict[str, dict[str, Any]]:
    """Each dashboard's JSON model (as Grafana exports it) keyed by uid."""
    boards = [json.loads(json.dumps(build(site).build(), cls=JSONEncoder)) for build in BUILDERS]
    return {board["uid"]: board for board in boards}


def dashboard_configmaps(site: Site) -> list[dict[str, Any]]:
    """One ConfigMap per dashboard, for the Grafana sidecar to load into its folder."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"grafana-dashboard-{uid}",
                "namespace": NAMESPACE,
                "labels": {SIDECAR_LABEL: SIDECAR_LABEL_VALUE, "app.kubernetes.io/part-of": "gpu-cluster"},
                "annotations": {FOLDER_ANNOTATION: FOLDERS[uid]},
            },
            "data": {f"{uid}.json": json.dumps(board, indent=2, sort_keys=True)},
        }
        for uid, board in render_dashboards(site).items()
    ]


GRAFANA_BUILTINS = {"__rate_interval": "5m", "__range": "1h", "__interval": "1m"}
"""Grafana's own variables, as it would fill them in for a 1 h range."""
VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows included, and the panels a collapsed row holds."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def targets(board: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for panel in panels(board):
        for target in panel.get("targets", []):
            yield panel, target


def as_sent(expr: str, board: dict[str, Any]) -> str:
    """expr as Grafana sends it with every variable on "All" and the data source variable removed."""
    variables = {v["name"]: v for v in board.get("templating", {}).get("list", [])}

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name in GRAFANA_BUILTINS:
            return GRAFANA_BUILTINS[name]
        if name not in variables:
            raise ValueError(f"dashboard {board.get('uid')}: ${name} is not a variable of the dashboard")
        return "" if variables[name]["type"] == "datasource" else str(variables[name].get("allValue") or ".*")

    return VARIABLE.sub(value, expr)
