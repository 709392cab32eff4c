"""The producers' metric names that gpuctl plan counts on, proven by running the real producers where one runs here:
the checkpoint mover writing its textfile, served by Debian's node_exporter with the textfile collector as the stack
configures it. (The Slurm exporter's names are proven against real Slurm in tests/integration/test_slurm_exporter.py;
the DCGM exporter's are read from the counters file it is given.)"""

import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from components.monitoring.lending_metrics import METRICS as LENDING_METRICS
from components.slurm.install import SYSTEMD_UNIT_DIR, controller_files, install_script, installed_files
from components.slurm.release import release_command
from components.slurm.scripts import LENDING_UNIT, render_lending_unit
from hosts import CHECKPOINT_MOVER
from hosts.checkpoint_mover import METRIC_PREFIX, METRICS
from runbooks.plan.producers import Deployed, Producer, producers, selects
from tests.builders import parse, prod_values
from tests.harness.daemons import free_ports, stop_all, wait_for

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")


def checkpoint(root: Path, name: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "shard-0.pt").write_bytes(b"weights")
    (root / name / "COMPLETE").touch()


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


@pytest.mark.skipif(NODE_EXPORTER is None, reason="needs node_exporter: apt-get install prometheus-node-exporter")
def test_should_serve_every_mover_metric_through_node_exporters_textfile_collector(tmp_path: Path) -> None:
    hot, cold, textfiles = tmp_path / "hot", tmp_path / "cold", tmp_path / "textfile_collector"
    checkpoint(hot / "speech" / "run-1", "step-000100")
    checkpoint(hot / "speech" / "run-1", "step-000200")
    textfiles.mkdir()
    # Both movers' CronJobs may land on one node: their files must not hold the same series.
    for index in (0, 1):
        moved = subprocess.run([sys.executable, str(CHECKPOINT_MOVER), "--hot", str(hot), "--cold", str(cold),
                                "--keep", "1", "--metrics-file", str(textfiles / f"checkpoint-tiering-{index}.prom"),
                                "--mover-name", f"checkpoint-mover-{index}"],
                               capture_output=True, text=True, timeout=60)
        assert moved.returncode == 0, moved.stderr
    (port,) = free_ports(1)
    assert NODE_EXPORTER is not None
    exporter = subprocess.Popen([NODE_EXPORTER, "--collector.disable-defaults", "--collector.textfile",
                                 f"--collector.textfile.directory={textfiles}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        def serving() -> bool:
            try:
                return METRIC_PREFIX in scrape(url)
            except OSError:
                return False

        wait_for("node_exporter to serve the mover's file", serving, timeout_s=10)
        samples = [line for line in scrape(url).splitlines() if line and not line.startswith("#")]
    finally:
        stop_all([exporter])
    served = {line.split("{")[0].split()[0] for line in samples}
    assert {name for name in served if name.startswith(METRIC_PREFIX)} == set(METRICS)
    assert "node_textfile_scrape_error 0" in samples
    movers = {line.split('mover="')[1].split('"')[0] for line in samples if line.startswith(METRIC_PREFIX)}
    assert movers == {"checkpoint-mover-0", "checkpoint-mover-1"}


def test_should_read_back_what_an_install_script_writes_and_runs() -> None:
    files = {"/etc/slurm/slurm.conf": ("ClusterName=x\n", 0o644),
             "/etc/systemd/system/srv-hot\\x2dtier.mount": ("[Mount]\nWhat='a b'\n", 0o644)}
    script = install_script(files, "systemctl daemon-reload && systemctl restart slurmctld")
    assert installed_files(script) == ({path: content for path, (content, _) in files.items()},
                                       "systemctl daemon-reload && systemctl restart slurmctld")


@pytest.mark.parametrize(("selector", "labels", "selected"), [
    (None, {"a": "1"}, False),
    ({}, {"a": "1"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "2"}}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "3"]}]}, {"a": "1"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "1"}, False),
])
def test_should_select_as_kubernetes_and_the_prometheus_operator_do(selector: dict[str, object] | None,
                                                                   labels: dict[str, str], selected: bool) -> None:
    assert selects(selector, labels) is selected


def test_should_know_which_labels_depend_on_configuration() -> None:
    ksm = Producer("kube-state-metrics", frozenset({"kube_node_labels"}), conditional=("label_",),
                   labels=frozenset({"label_gpucluster_io_flex_lent"}))
    assert ksm.has_label("node", "kube_node_labels")
    assert ksm.has_label("label_gpucluster_io_flex_lent", "kube_node_labels")
    assert not ksm.has_label("label_team", "kube_node_labels")


def test_should_keep_a_label_allowed_on_pods_off_the_nodes_metric() -> None:
    ksm = Producer("kube-state-metrics", frozenset({"kube_node_labels", "kube_pod_labels"}), conditional=("label_",),
                   labels_of={"kube_node_labels": frozenset(), "kube_pod_labels": frozenset({"label_app"})})
    assert ksm.has_label("label_app", "kube_pod_labels") and ksm.has_label("pod", "kube_pod_labels")
    assert not ksm.has_label("label_app", "kube_node_labels")


def _controller_deployed(then: str, targets: list[str]) -> Deployed:
    """The Slurm controller's install command and a Prometheus whose additional scrape configs name `targets`."""
    site = parse(prod_values())
    prometheus = {"kind": "Prometheus", "metadata": {"name": "p", "namespace": "monitoring"},
                  "spec": {"additionalScrapeConfigs": {"name": "extra", "key": "scrape.yaml"}}}
    secret = {"kind": "Secret", "metadata": {"name": "extra", "namespace": "monitoring"},
              "stringData": {"scrape.yaml": yaml.safe_dump([{"job_name": "x", "static_configs": [
                  {"targets": targets}]}])}}
    unit = {f"{SYSTEMD_UNIT_DIR}/{LENDING_UNIT}": (render_lending_unit(site, "prod"), 0o644)}
    files, _ = installed_files(install_script(controller_files(site) | unit, then))
    return Deployed([prometheus, secret], [], {"controller": (files, then)})


# What the stack's command for the lending controller runs once it has written the unit.
RELEASE_THEN = installed_files(release_command(parse(prod_values()), "prod", "0123456789abcdef"))[1]


def _lending(deployed: Deployed) -> Producer:
    return next(p for p in producers(deployed) if p.name.startswith("lending controller"))


def test_should_count_the_lending_controller_as_a_producer_when_started_and_scraped() -> None:
    lending = _lending(_controller_deployed(RELEASE_THEN, ["slurm-controller:9341", "slurm-controller:9342"]))
    assert (lending.absent, lending.metrics) == ("", frozenset(LENDING_METRICS))


@pytest.mark.parametrize(("then", "targets", "absent"), [
    pytest.param("systemctl daemon-reload && systemctl enable gpucluster-slurm-exporter.service && systemctl restart "
                 "gpucluster-slurm-exporter.service", ["slurm-controller:9342"],
                 "no remote command installs, enables and starts gpucluster-flex-controller.service",
                 id="should not count a controller the stack never starts"),
    pytest.param(RELEASE_THEN, ["slurm-controller:9341"],
                 "it listens on port 9342; Prometheus scrapes no static target on that port (slurm-controller:9341)",
                 id="should not count a controller no prometheus scrapes"),
])
def test_should_say_why_the_lending_controllers_metrics_are_missing(then: str, targets: list[str],
                                                                    absent: str) -> None:
    assert _lending(_controller_deployed(then, targets)).absent == absent
