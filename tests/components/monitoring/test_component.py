"""The monitoring stack's values and facts follow the spec, and its pieces agree with each other."""

import re
from typing import Any

from components.gpu_operator.dcgm_counters import COUNTERS
from components.monitoring.alerts import render_rule_groups
from components.monitoring.prometheus import (
    COLD_WRITE_URL,
    cold_tier_values,
    dcgm_service_monitor,
    prometheus_values,
)
from tests.builders import parse, with_changes


def test_should_keep_the_specs_hot_and_cold_retention(prod: dict[str, Any]) -> None:
    site = parse(with_changes(prod, monitoring={"hot_retention_days": 45, "cold_retention_days": 730}))
    spec = prometheus_values(site)["prometheus"]["prometheusSpec"]
    assert spec["retention"] == "45d"
    assert spec["remoteWrite"] == [{"url": COLD_WRITE_URL}]
    assert cold_tier_values(site)["server"]["retentionPeriod"] == "730d"
    # Twice the days, twice the volume: 2 x 111 GiB for prod's ingest.
    assert cold_tier_values(site)["server"]["persistentVolume"]["size"] == "222Gi"
    assert spec["storageSpec"]["volumeClaimTemplate"]["spec"]["resources"]["requests"]["storage"] == "28Gi"


def test_should_mount_the_notification_secret_where_the_routing_reads_it(prod: dict[str, Any]) -> None:
    site = parse(prod)
    alertmanager = prometheus_values(site)["alertmanager"]
    mount = alertmanager["alertmanagerSpec"]["volumeMounts"][0]["mountPath"]
    assert alertmanager["config"]["global"]["slack_api_url_file"].startswith(mount + "/")


def test_should_enable_every_dcgm_counter_the_rules_read(prod: dict[str, Any]) -> None:
    rules = str(render_rule_groups(parse(prod)))
    named = set(re.findall(r"DCGM_FI_[A-Z_]+[A-Z]", rules))
    # The NVLink error rule matches its counters by regex: DCGM_FI_DEV_NVLINK_(CRC_FLIT|...)_ERROR_COUNT_TOTAL.
    for group in re.findall(r"DCGM_FI_DEV_NVLINK_\(([A-Z_|]+)\)_ERROR_COUNT_TOTAL", rules):
        named |= {f"DCGM_FI_DEV_NVLINK_{kind}_ERROR_COUNT_TOTAL" for kind in group.split("|")}
    named.discard("DCGM_FI_DEV_NVLINK")  # the regex prefix itself
    enabled = {field for field, _, _ in COUNTERS}
    assert named and named <= enabled, named - enabled


def test_should_scrape_the_exporter_in_the_operators_namespace(prod: dict[str, Any]) -> None:
    site = parse(with_changes(prod, gpu_operator={"namespace": "nvidia"}))
    assert dcgm_service_monitor(site)["spec"]["namespaceSelector"] == {"matchNames": ["nvidia"]}


def test_should_scrape_the_slurm_exporter_and_the_lending_and_health_controllers_on_the_controller(
        prod: dict[str, Any]) -> None:
    site = parse(with_changes(prod, slurm__controller_host="slurmctl-01.dc1.internal", slurm__exporter_port=9400,
                              lending__metrics_port=9401, lending__interval_s=15, health__metrics_port=9402,
                              health__interval_s=20))
    spec = prometheus_values(site)["prometheus"]["prometheusSpec"]
    assert spec["additionalScrapeConfigs"] == [
        {"job_name": "slurm", "scrape_interval": "30s",
         "static_configs": [{"targets": ["slurmctl-01.dc1.internal:9400"]}]},
        {"job_name": "flex-controller", "scrape_interval": "15s",
         "static_configs": [{"targets": ["slurmctl-01.dc1.internal:9401"]}]},
        {"job_name": "health-controller", "scrape_interval": "20s",
         "static_configs": [{"targets": ["slurmctl-01.dc1.internal:9402"]}]}]


def test_should_export_the_flex_lent_node_label_and_the_model_servers_pod_label(prod: dict[str, Any]) -> None:
    assert prometheus_values(parse(prod))["kube-state-metrics"] == {
        "metricLabelsAllowlist": ["nodes=[gpucluster.io/flex-lent]", "pods=[app.kubernetes.io/component]"]}


