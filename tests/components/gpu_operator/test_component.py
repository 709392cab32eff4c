"""The GPU Operator's chart values follow the spec and keep it the only driver layer."""

from typing import Any

from components.gpu_operator.dcgm_counters import COUNTERS, render_counters_csv
from components.gpu_operator.values import operator_values
from tests.builders import parse, problems, with_changes


def test_should_install_the_specs_driver_with_mig_off(prod: dict[str, Any]) -> None:
    values = operator_values(parse(with_changes(prod, gpu_operator={"driver_version": "550.127.08"})))
    assert values["driver"] == {"enabled": True, "version": "550.127.08"}
    assert values["migManager"] == {"enabled": False}
    assert all(values[part]["enabled"] for part in ("toolkit", "devicePlugin", "gfd", "dcgmExporter"))


def test_should_map_dcgm_metrics_to_pods_and_slurm_jobs(prod: dict[str, Any]) -> None:
    exporter = operator_values(parse(prod))["dcgmExporter"]
    assert {e["name"]: e["value"] for e in exporter["env"]} == {
        "DCGM_EXPORTER_COLLECTORS": "/etc/dcgm-exporter/dcgm-metrics.csv",
        "DCGM_EXPORTER_KUBERNETES": "true",
    }
    assert exporter["hpcJobMapping"] == {"enabled": True, "directory": "/var/run/dcgm-hpc-jobs"}


def test_should_run_operands_on_unvalidated_and_slurm_nodes(prod: dict[str, Any]) -> None:
    keys = {t["key"] for t in operator_values(parse(prod))["daemonsets"]["tolerations"]}
    assert {"gpucluster.io/unvalidated", "gpucluster.io/pool"} <= keys


def test_should_enable_the_counters_the_default_csv_leaves_out() -> None:
    csv = render_counters_csv()
    for field in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                  "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_XID_ERRORS"):
        assert f"\n{field}, " in f"\n{csv}"
    assert len(csv.splitlines()) == len(COUNTERS) == len({c[0] for c in COUNTERS})


def test_should_deny_a_driver_older_than_the_node_check_requires(prod: dict[str, Any]) -> None:
    assert problems(with_changes(prod, gpu_operator={"driver_version": "470.256.02"})) == [
        "gpu_operator.driver_version: 470.256.02 is older than node_check.min_driver_version 535.104.05, "
        "the oldest driver the site accepts"
    ]


def test_should_pin_the_driver_root_and_toolkit_slurm_uses_and_run_dcgm_where_the_node_check_diagnoses(
        prod: dict[str, Any]) -> None:
    values = operator_values(parse(prod))
    assert values["hostPaths"] == {"driverInstallDir": "/run/nvidia/driver"}
    assert values["toolkit"] == {"enabled": True, "installDir": "/usr/local/nvidia"}
    assert values["dcgm"] == {"enabled": True}
