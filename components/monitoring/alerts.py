"""Prometheus rules from the site spec: per-GPU recording rules, GPU and pool alerts, LLM API cost.

Pure: `render_rule_groups` gives the plain `groups:` file that `promtool check/test rules` reads;
`prometheus_rule_manifest` wraps the same groups as a PrometheusRule for the Prometheus Operator.

Source metrics, and where their names come from:
- dcgm-exporter (NVIDIA/dcgm-exporter etc/default-counters.csv): DCGM_FI_DEV_GPU_UTIL, _GPU_TEMP,
  _MEMORY_TEMP, _XID_ERRORS (a gauge holding the last XID), _ROW_REMAP_FAILURE are on by default;
  _ECC_DBE_VOL_TOTAL, _THERMAL_VIOLATION (us) and _NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_TOTAL
  are commented out there and must be enabled in the exporter's counters CSV. Labels: Hostname, gpu,
  UUID, modelName, plus namespace/pod/container (Kubernetes mapping) or hpc_job (Slurm mapping).
- kube-state-metrics: kube_node_status_condition{node, condition, status}; kube_node_labels{node, label_<name>}
  for the labels allowlisted in its chart values (components/monitoring/component.py), names sanitized to [a-zA-Z0-9_].
- hosts/slurm_exporter.py on the Slurm controller: slurm_nodes_down, slurm_nodes_drain, slurm_nodes_fail
  (vpenso/prometheus-slurm-exporter's names) and slurm_job_account{slurmjobid, account} (job -> Slurm account).
- the lending controller (`gpuctl flex control`) on the Slurm controller: gpucluster_flex_nodes{owner},
  gpucluster_flex_moves_total{action}, gpucluster_flex_last_decision_timestamp_seconds
  (components/monitoring/lending_metrics.py).
- the node health controller (`gpuctl health control`) on the Slurm controller: gpucluster_health_node_phase{node,
  phase}, gpucluster_health_last_decision_timestamp_seconds (components/monitoring/health_metrics.py).
- node-exporter's mountstats collector (node_exporter collector/mountstats_linux.go, on by --collector.mountstats):
  node_mountstats_nfs_operations_requests_total and _request_time_seconds_total (s from a request's queueing to its
  reply), labels export (the mount's `server:/path`), protocol, mountaddr, operation (READ, WRITE, ...), and Hostname,
  the node's name, which the stack's scrape of node-exporter adds (components/monitoring/prometheus.py).
- LiteLLM proxy 1.80.5, the one gateway of LLM traffic (litellm/types/integrations/prometheus.py, checked against the
  running proxy: ../shared/notes/litellm-offline.md): litellm_input_tokens_metric_total and
  litellm_output_tokens_metric_total, labels team (LiteLLM's team id), team_alias, model (the backend's name) and
  requested_model (the gateway's model name); requests that no key authenticated carry team_alias="None";
  litellm_proxy_total_requests_metric_total and litellm_proxy_failed_requests_metric_total (label exception_status)
  count requests per requested_model and team_alias.
"""

import re
from enum import StrEnum
from typing import Any

from components.monitoring import health_metrics
from components.monitoring.lending_metrics import LAST_DECISION, MOVES, NODES
from components.site.derived import once_per_site
from components.site.lending import Lending
from components.site.site import KUBERNETES_POOLS, SLURM_POOLS, Pool, Site
from components.site.wellknown import FLEX_LENT_LABEL, MONITORING_NAMESPACE

KSM_FLEX_LENT = "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", FLEX_LENT_LABEL)
"""The flex-lent node label as kube-state-metrics names it on kube_node_labels."""
GPU = ("Hostname", "gpu", "UUID", "modelName")
"""dcgm-exporter labels that name one physical GPU; pod, namespace and hpc_job change with its tenant."""

GPU_MATCH = "Hostname, gpu, UUID"
"""Labels that join per-GPU series (modelName follows from UUID)."""

RULE_NAMESPACE = MONITORING_NAMESPACE
"""Namespace of the PrometheusRule (where the Prometheus Operator watches for rules)."""

THERMAL_WINDOW = "10m"
"""Window over which the share of time a GPU spends thermally throttled is taken."""

COUNTER_WINDOW = "10m"
"""Window in which any increase of an error counter raises its alert."""

XID_APPLICATION_WINDOW = "15m"
"""How long an application XID stays raised after it is logged (the gauge keeps the last XID)."""

NVLINK_ERROR_COUNTERS = ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")


def duration(seconds: int) -> str:
    """A Prometheus duration of whole seconds, in minutes where it is whole minutes (`2m`, `90s`, `0s`)."""
    return f"{seconds // 60}m" if seconds and seconds % 60 == 0 else f"{seconds}s"


class Severity(StrEnum):
    CRITICAL = "critical"
    """An incident: pages on-call and posts to the incident channel."""
    WARNING = "warning"
    """Needs a look within the working day."""
    TUNING = "tuning"
    """A waste or misuse the owning team should fix."""


class Record:
    """Names of the recorded series the alerts read."""

    GPU_UTIL = "gpu:dcgm_gpu_util:max"
    GPU_TEMP = "gpu:dcgm_gpu_temp:max"
    MEMORY_TEMP = "gpu:dcgm_memory_temp:max"
    XID = "gpu:dcgm_xid_errors:max"
    XID_BY_CODE = "gpu_xid:dcgm_xid_errors:count_values"
    ROW_REMAP_FAILURE = "gpu:dcgm_row_remap_failure:max"
    ECC_DBE = "gpu:dcgm_ecc_dbe_vol_total:max"
    THERMAL_VIOLATION = "gpu:dcgm_thermal_violation_us:max"
    NVLINK_ERRORS = "gpu:dcgm_nvlink_errors:sum"
    OWNER = "gpu_team:dcgm_owner:group"
    TOKENS = "team_model_token_type:llm_tokens:rate1h"
    PRICE = "llm:price_usd_per_mtok"
    COST = "team_model_token_type:llm_cost_usd_per_hour:rate1h"
    TEAM_COST = "team:llm_cost_usd_per_hour:rate1h"


def kebab(alert: str) -> str:
    """`GpuUtilizationLow` -> `gpu-utilization-low`: the SOP file name under docs/sop/."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", alert).lower()


def runbook_url(site: Site, alert: str) -> str:
    return f"{site.alerting.runbook_base_url}/{kebab(alert)}.md"


def _alternatives(values: list[str]) -> str:
    # Team and node names are DNS labels and XIDs digits: nothing to escape in a regex or a PromQL string.
    return "|".join(values)


def _team_regex(site: Site) -> str:
    return _alternatives([t.name for t in site.teams])


def _nodes(site: Site, pools: tuple[Pool, ...]) -> list[str]:
    return [n.name for g in site.node_groups if g.pool in pools for n in g.nodes]


def _per_gpu(metric: str) -> str:
    # max, not sum: while a pod label changes, the old and the new series overlap for one lookback.
    return f"max by ({', '.join(GPU)}) ({metric})"


def _with_team(expr: str) -> str:
    """expr's per-GPU series, labelled with the team now using the GPU where one is."""
    return (
        f"({expr}) * on ({GPU_MATCH}) group_left (team) {Record.OWNER}\n"
        f"or on ({GPU_MATCH}) ({expr})"
    )


def _owner_rule(site: Site) -> str:
    """Which team uses each GPU: its pod's namespace, or its Slurm job's account."""
    teams = _team_regex(site)
    by = f"group by ({GPU_MATCH}, team)"
    # topk 1: while a GPU changes hands both tenants' series overlap for a lookback; one owner keeps the
    # group_left joins that read this series one-to-one.
    return (
        f"topk by ({GPU_MATCH}) (1,\n"
        f'{by} (label_replace(DCGM_FI_DEV_GPU_UTIL{{namespace=~"{teams}"}}, "team", "$1", "namespace", "(.+)"))\n'
        f"or\n"
        f"{by} (label_replace(\n"
        f'  label_replace(DCGM_FI_DEV_GPU_UTIL{{hpc_job!=""}}, "slurmjobid", "$1", "hpc_job", "(.+)")\n'
        f"  * on (slurmjobid) group_left (account)\n"
        f'  group by (slurmjobid, account) (slurm_job_account{{account=~"{teams}"}}),\n'
        f'  "team", "$1", "account", "(.+)")))'
    )


def gpu_recording_rules(site: Site) -> list[dict[str, Any]]:
    nvlink = "|".join(NVLINK_ERROR_COUNTERS)
    rules = [
        (Record.GPU_UTIL, _per_gpu("DCGM_FI_DEV_GPU_UTIL")),
        (Record.GPU_TEMP, _per_gpu("DCGM_FI_DEV_GPU_TEMP")),
        (Record.MEMORY_TEMP, _per_gpu("DCGM_FI_DEV_MEMORY_TEMP")),
        (Record.XID, _per_gpu("DCGM_FI_DEV_XID_ERRORS")),
        # The XID as a label, so alerts can select hardware codes and show the code.
        (Record.XID_BY_CODE, f'count_values by ({", ".join(GPU)}) ("xid", {Record.XID})'),
        (Record.ROW_REMAP_FAILURE, _per_gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE")),
        (Record.ECC_DBE, _per_gpu("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")),
        (Record.THERMAL_VIOLATION, _per_gpu("DCGM_FI_DEV_THERMAL_VIOLATION")),
        # Collapse each counter on its own (by __name__) before adding them up.
        (Record.NVLINK_ERRORS, f"sum by ({', '.join(GPU)}) (max by (__name__, {', '.join(GPU)}) "
                               f'({{__name__=~"DCGM_FI_DEV_NVLINK_({nvlink})_ERROR_COUNT_TOTAL"}}))'),
        (Record.OWNER, _owner_rule(site)),
    ]
    return [{"record": name, "expr": expr} for name, expr in rules]


def _alert(site: Site, name: str, expr: str, severity: Severity, summary: str, for_: str = "0m") -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity.value},
        "annotations": {"summary": summary, "runbook_url": runbook_url(site, name)},
    }


WHERE = "GPU {{ $labels.gpu }} on {{ $labels.Hostname }}"
VALUE = '{{ $value | printf "%.1f" }}'


def gpu_alerts(site: Site) -> list[dict[str, Any]]:
    mon, alerting = site.monitoring, site.alerting
    overheat_for = duration(alerting.overheat_for_s)
    window = f"{mon.gpu_util_low_window_h}h"
    hardware = _alternatives([str(x) for x in alerting.xid_hardware])
    # `offset` keeps GPUs younger than the window out: no sample a full window ago, no verdict.
    low_util = (
        f"avg_over_time({Record.GPU_UTIL}[{window}]) < {mon.gpu_util_low_pct:g}\n"
        f"and on ({GPU_MATCH}) ({Record.GPU_UTIL} offset {window})"
    )
    application_xid = (
        f'{Record.XID_BY_CODE}{{xid!~"0|{hardware}"}}\n'
        f"and on ({GPU_MATCH}) changes({Record.XID}[{XID_APPLICATION_WINDOW}]) > 0"
    )
    # DCGM counts throttled microseconds; us per second / 1e4 = % of the time.
    throttled = f"rate({Record.THERMAL_VIOLATION}[{THERMAL_WINDOW}]) / 1e4 > {alerting.thermal_throttle_pct:g}"
    missing = "\nor ".join(
        f'count by (Hostname) ({Record.GPU_TEMP}{{Hostname=~"{_alternatives([n.name for n in g.nodes])}"}})'
        f" < {g.gpus_per_node}"
        for g in site.node_groups
    )
    # absent() keeps the Hostname matcher as a label, so a silent node inhibits its own GPU alerts.
    silent = "\nor ".join(f'absent(DCGM_FI_DEV_GPU_TEMP{{Hostname="{n}"}})' for n in _nodes(site, tuple(Pool)))
    return [
        _alert(site, "GpuUtilizationLow", _with_team(low_util), Severity.TUNING,
               f"{WHERE} averaged {VALUE} % utilization over {window} "
               f"(under {mon.gpu_util_low_pct:g} %)"),
        _alert(site, "GpuTemperatureHigh", f"{Record.GPU_TEMP} > {mon.gpu_temp_incident_c:g}", Severity.CRITICAL,
               f"{WHERE} is at {VALUE} C (over {mon.gpu_temp_incident_c:g} C)", overheat_for),
        _alert(site, "GpuHbmTemperatureHigh", f"{Record.MEMORY_TEMP} > {alerting.hbm_temp_incident_c:g}",
               Severity.CRITICAL, f"HBM of {WHERE} is at {VALUE} C (over {alerting.hbm_temp_incident_c:g} C)",
               overheat_for),
        _alert(site, "GpuThermalThrottling", throttled, Severity.WARNING,
               f"{WHERE} was thermally throttled {VALUE} % of the last {THERMAL_WINDOW}", "5m"),
        _alert(site, "GpuXidHardwareError", f'{Record.XID_BY_CODE}{{xid=~"{hardware}"}}', Severity.CRITICAL,
               f"{WHERE} logged hardware XID {{{{ $labels.xid }}}}"),
        _alert(site, "GpuXidApplicationError", _with_team(application_xid), Severity.WARNING,
               f"{WHERE} logged application XID {{{{ $labels.xid }}}}"),
        _alert(site, "GpuEccDoubleBitError", f"increase({Record.ECC_DBE}[{COUNTER_WINDOW}]) > 0", Severity.CRITICAL,
               f"{WHERE} had {VALUE} double-bit ECC errors in {COUNTER_WINDOW}"),
        _alert(site, "GpuRowRemapFailure", f"{Record.ROW_REMAP_FAILURE} > 0", Severity.CRITICAL,
               f"{WHERE} failed to remap a memory row"),
        _alert(site, "GpuNvlinkErrors", f"increase({Record.NVLINK_ERRORS}[{COUNTER_WINDOW}]) > 0", Severity.WARNING,
               f"{WHERE} had {VALUE} NVLink errors in {COUNTER_WINDOW}"),
        _alert(site, "DcgmExporterDown", silent, Severity.CRITICAL,
               "No GPU metrics from {{ $labels.Hostname }} (exporter or node down)", "5m"),
        _alert(site, "GpuMissing", missing, Severity.CRITICAL,
               "Only {{ $value }} GPUs visible on {{ $labels.Hostname }}", "5m"),
    ]


def pool_alerts(site: Site) -> list[dict[str, Any]]:
    slurm_nodes = _nodes(site, SLURM_POOLS)
    kube_nodes = _alternatives(_nodes(site, KUBERNETES_POOLS))
    # Hostname, as dcgm-exporter names nodes, so a NotReady node inhibits its GPUs' symptoms.
    not_ready = (
        f'label_replace(kube_node_status_condition{{condition="Ready", status="true", node=~"{kube_nodes}"}},'
        f' "Hostname", "$1", "node", "(.+)") == 0'
    )
    # A flex node lent to inference is drained in Slurm on purpose (runbooks/flex/lending.py): it is not missing.
    lent = f'kube_node_labels{{{KSM_FLEX_LENT}="true"}}'
    unavailable = f"slurm_nodes_down + slurm_nodes_drain + slurm_nodes_fail - on() (count({lent}) or vector(0)) > 0"
    return [
        _alert(site, "SlurmNodesUnavailable", unavailable, Severity.WARNING,
               f"{{{{ $value }}}} of {len(slurm_nodes)} Slurm GPU nodes are down, drained or failed (flex nodes "
               "lent to inference not counted)", "15m"),
        _alert(site, "KubernetesGpuNodeNotReady", not_ready, Severity.CRITICAL,
               "Kubernetes GPU node {{ $labels.Hostname }} is not Ready", "5m"),
    ]


MOVER_LATEST_RUN = ("gpucluster_checkpoint_last_run_timestamp_seconds == on (mover) group_left "
                    "max by (mover) (gpucluster_checkpoint_last_run_timestamp_seconds)")
"""Each mover's newest run: a mover CronJob runs on any node, and every node it ran on keeps its last file (and
node-exporter serves it) until the node's disk is wiped; only the newest one says how the mover is doing now."""


STORAGE_LATENCY_WINDOW = "2m"
"""Window over which a node's mean NFS WRITE time to the hot tier is taken: short enough that the storage-jitter
drill's 300 s detection deadline holds (half the window delayed, then `for`), long enough to span many writes."""
NFS_REQUESTS = "node_mountstats_nfs_operations_requests_total"
NFS_REQUEST_TIME = "node_mountstats_nfs_operations_request_time_seconds_total"


def _hot_exports(site: Site) -> str:
    """The hot tier's NFS mounts as mountstats names them (`server:/path`): each server's export root or a share
    under it. Dots escaped for the regex, and the backslash for the PromQL string."""
    nfs = site.storage.nfs_hot
    servers = _alternatives([s.replace(".", "\\\\.") for s in nfs.servers])
    return f"({servers}):{nfs.export_root}(/.*)?"


def storage_alerts(site: Site) -> list[dict[str, Any]]:
    """On the checkpoint mover's own metrics (hosts/checkpoint_mover.py, node-exporter textfile), each mover judged by
    its newest run, so a node it left cannot hold an alert; and on each node's NFS client times to the hot tier."""
    nfs = site.storage.nfs_hot
    fill = nfs.fill_alert_pct
    writes = f'{{operation="WRITE", export=~"{_hot_exports(site)}"}}'
    # Mean time per WRITE: the checkpoint path as the jobs' own writes see it (a delayed link, a slow server).
    write_ms = (f"sum by (Hostname, export) (rate({NFS_REQUEST_TIME}{writes}[{STORAGE_LATENCY_WINDOW}]))\n"
                f"/ sum by (Hostname, export) (rate({NFS_REQUESTS}{writes}[{STORAGE_LATENCY_WINDOW}])) * 1000")
    return [
        _alert(site, "StorageJitter", f"{write_ms} > {nfs.write_latency_alert_ms}", Severity.WARNING,
               f"NFS writes from {{{{ $labels.Hostname }}}} to {{{{ $labels.export }}}} take {VALUE} ms on average "
               f"(over {nfs.write_latency_alert_ms} ms): checkpoints stall", "1m"),
        _alert(site, "CheckpointHotTierFilling",
               f"max by (mover) (gpucluster_checkpoint_hot_fill_ratio and on (instance, mover) ({MOVER_LATEST_RUN}))"
               f" * 100 > {fill:g}", Severity.WARNING,
               f"NFS hot tier of {{{{ $labels.mover }}}} is {VALUE} % full (over {fill:g} %)", "15m"),
        _alert(site, "CheckpointMoverFailing",
               f"sum by (mover, instance) (gpucluster_checkpoint_last_run_errors and on (instance, mover) "
               f"({MOVER_LATEST_RUN})) > 0", Severity.WARNING,
               "The last run of {{ $labels.mover }} (on {{ $labels.instance }}) left {{ $value }} checkpoints on hot "
               "after errors"),
    ]


LENDING_STALE_INTERVALS = 5
"""Decision intervals without a decision after which the lending controller counts as down."""


def lending_stale_s(lending: Lending) -> int:
    """s without a decision after which the lending controller counts as down: LendingControllerDown's threshold, and
    the acceptance campaign's (runbooks.acceptance.verdict `lending controller`)."""
    return LENDING_STALE_INTERVALS * lending.interval_s


def lending_alerts(site: Site) -> list[dict[str, Any]]:
    """On the lending controller's own metrics (runbooks/flex/metrics.py, scraped on the Slurm controller)."""
    lending = site.lending
    stale_s = lending_stale_s(lending)
    window = f"{lending.flapping_window_h}h"
    # owner="lending": drained for lending, still waiting for jobs (components.scheduling.lending_decision.Owner).
    return [
        _alert(site, "LendNotCompleted", f'max({NODES}{{owner="lending"}}) > 0', Severity.WARNING,
               f"{{{{ $value }}}} flex nodes drained for inference have not been lent after {lending.lend_wait_s} s: "
               "a job the table protects (or one Slurm cannot requeue) still runs on them", f"{lending.lend_wait_s}s"),
        _alert(site, "LendingFlapping", f"sum(increase({MOVES}[{window}])) >= {lending.flapping_moves}",
               Severity.WARNING, f"The lending controller moved flex nodes {VALUE} times in {window} (at most "
                                 f"{lending.flapping_moves - 1} expected)"),
        _alert(site, "LendingControllerDown",
               f"time() - max({LAST_DECISION}) > {stale_s}\nor absent({LAST_DECISION})", Severity.WARNING,
               f"The lending controller has not decided for over {stale_s} s: flex nodes stay where they are", "5m"),
    ]


HEALTH_STALE_INTERVALS = 5
"""Health decision intervals without a decision on fresh inputs after which the health controller counts as down."""


INFERENCE_ERROR_WINDOW = "5m"
"""Window over which a served model's share of failed requests is taken: a hot swap's cut-over is seconds to minutes."""


def inference_alerts(site: Site) -> list[dict[str, Any]]:
    """On the gateway's counters: a served model whose requests fail, as a failed hot swap (no ready endpoint, a new
    version that errors) shows at the gateway. Server-side failures of requests a key authenticated, as the rollout's
    inference gate counts them, against its error budget."""
    served = _alternatives([m.name for m in site.inference.models])
    if not served:
        return []
    budget = site.rollout.gates.max_inference_error_pct
    keyed = f'team_alias!="None", requested_model=~"{served}"'
    failed = (f"sum by (requested_model) (rate(litellm_proxy_failed_requests_metric_total"
              f'{{{keyed}, exception_status!~"4.."}}[{INFERENCE_ERROR_WINDOW}]))')
    total = (f"sum by (requested_model) (rate(litellm_proxy_total_requests_metric_total{{{keyed}}}"
             f"[{INFERENCE_ERROR_WINDOW}]))")
    return [
        _alert(site, "ModelRequestsFailing", f"100 * {failed}\n/ {total} > {budget:g}", Severity.WARNING,
               f"{VALUE} % of requests to {{{{ $labels.requested_model }}}} fail at the gateway (over {budget:g} %): "
               "a model swap or its replicas are failing", "2m"),
    ]


def health_alerts(site: Site) -> list[dict[str, Any]]:
    """On the node health controller's own metrics (runbooks/health/metrics.py, scraped on the Slurm controller)."""
    health = site.health
    stale_s = HEALTH_STALE_INTERVALS * health.interval_s
    last = health_metrics.LAST_DECISION
    return [
        _alert(site, "NodeHandedToAHuman", f'max by (node) ({health_metrics.NODE_PHASE}{{phase="handed"}}) > 0',
               Severity.WARNING, f"{{{{ $labels.node }}}} failed {health.failures_before_handoff} diagnoses (or "
                                 f"relapsed) within {health.failure_window_h} h: the health controller keeps it "
                                 "drained and cordoned until a human acts"),
        # A paused controller (Prometheus, Slurm or kubectl unreadable, every DCGM sample stale) decides nothing
        # either: LAST_DECISION moves only on fresh inputs.
        # A node with a finding left in service keeps failing jobs: worth a look once it lasts, not at once (a
        # return frees the budget within the diagnosis' ~15 minutes).
        _alert(site, "HealthDrainBudgetExhausted", f"max({health_metrics.BUDGET_WAITING}) > 0", Severity.WARNING,
               f"{{{{ $value }}}} GPU nodes with a DCGM finding stay in service: the health controller already holds "
               f"{health.max_drained_pct:g} % of the GPU nodes (health.max_drained_pct)", "15m"),
        _alert(site, "HealthControllerDown", f"time() - max({last}) > {stale_s}\nor absent({last})",
               Severity.WARNING, f"The node health controller has not decided on fresh inputs for over {stale_s} s: "
                                 "failing GPUs are not drained", "5m"),
    ]


TOKEN_COUNTERS = {"prompt": "litellm_input_tokens_metric_total", "completion": "litellm_output_tokens_metric_total"}
"""The gateway's token counters by token type (LiteLLM does not split cached prompt tokens)."""
UNATTRIBUTED = "None"
"""What LiteLLM writes in a label it has no value for, e.g. the team of a request no key authenticated."""


def _gateway_tokens(metric: str) -> str:
    # Teams are created at the gateway with the spec's team name as alias (runbooks/gateway); the price table is keyed
    # by the gateway's model name, which LiteLLM labels requested_model.
    rate = f'rate({metric}{{team_alias!="{UNATTRIBUTED}"}}[1h])'
    return (f'sum by (team, model) (label_replace(label_replace({rate}, "team", "$1", "team_alias", "(.*)"),'
            f' "model", "$1", "requested_model", "(.*)"))')


def llm_cost_rules(site: Site) -> list[dict[str, Any]]:
    """Token rates per team, model and token type from the gateway, the price table as constant series, and their
    product.

    Prices are series (one `vector(price)` per model and token type) rather than numbers baked into one rule per
    model, so the cost is a single join that promtool can evaluate and a price change touches one line.
    """
    rules: list[dict[str, Any]] = [
        {"record": Record.TOKENS, "expr": _gateway_tokens(metric), "labels": {"token_type": token_type}}
        for token_type, metric in TOKEN_COUNTERS.items()
    ]
    for price in site.inference.prices():
        per_type = {"prompt": price.prompt_usd_per_mtok, "completion": price.completion_usd_per_mtok}
        rules += [
            {"record": Record.PRICE, "expr": f"vector({usd!r})", "labels": {"model": price.model, "token_type": kind}}
            for kind, usd in per_type.items()
        ]
    rules += [
        {"record": Record.COST,
         "expr": f"{Record.TOKENS} * on (model, token_type) group_left {Record.PRICE} * 3600 / 1e6"},
        {"record": Record.TEAM_COST, "expr": f"sum by (team) ({Record.COST})"},
    ]
    return rules


@once_per_site
def render_rule_groups(site: Site) -> dict[str, Any]:
    """The rule file as promtool and Prometheus read it."""
    every = duration(site.monitoring.rule_evaluation_interval_s)
    return {"groups": [
        # One group: rules in a group run in order, so alerts read this evaluation's per-GPU series, not
        # the last one's (groups run independently), and a `for: 2m` means 2 m.
        {"name": "gpu", "interval": every, "rules": gpu_recording_rules(site) + gpu_alerts(site)},
        {"name": "pool-alerts", "interval": every, "rules": pool_alerts(site)},
        {"name": "storage-alerts", "interval": every, "rules": storage_alerts(site)},
        {"name": "inference-alerts", "interval": every, "rules": inference_alerts(site)},
        {"name": "lending-alerts", "interval": every, "rules": lending_alerts(site)},
        {"name": "health-alerts", "interval": every, "rules": health_alerts(site)},
        {"name": "llm-cost", "interval": every, "rules": llm_cost_rules(site)},
    ]}


def alert_names(site: Site) -> list[str]:
    return [r["alert"] for g in render_rule_groups(site)["groups"] for r in g["rules"] if "alert" in r]


def prometheus_rule_manifest(site: Site) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": f"{site.site_name}-gpu-cluster", "namespace": RULE_NAMESPACE,
                     "labels": {"app.kubernetes.io/part-of": "gpu-cluster"}},
        "spec": render_rule_groups(site),
    }
