"""The rendered alerting path and the cold tier, live: real Prometheus 2.42, Alertmanager 0.25 and
VictoriaMetrics 1.79 on 127.0.0.1.

A fake dcgm-exporter (prometheus-client, in this process) reports two GPUs of a prod node. Prometheus
scrapes it every second, evaluates the rules the plan writes for a site whose minutes are seconds, sends
alerts to an Alertmanager running the config the plan writes for it, and remote-writes to VictoriaMetrics
at the path of `COLD_WRITE_URL`; each daemon gets the retention the stack renders for it.

Receivers and routes stay the production ones: the spec's on-call URL and secrets_dir point at a local
recorder of POSTs, and the Slack URL file there holds the recorder's address too. Neither file is
edited after the plan writes it. Every daemon is a child process
stopped by its PID when the module ends, pass or fail; every wait is bounded. See
../shared/notes/observability-tools.md.
"""

import contextlib
import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from components.monitoring.alertmanager import ONCALL_TOKEN_FILE, SLACK_API_URL_FILE
from components.monitoring.alerts import Record, Severity, runbook_url
from components.monitoring.prometheus import COLD_WRITE_URL, cold_tier_values, prometheus_values
from components.site.site import Site
from runbooks.plan.files import ALERTMANAGER_FILE, RULES_FILE, artifacts
from tests.builders import parse, prod_values, with_changes
from tests.harness.daemons import free_ports, stop_all, wait_for
from tests.harness.figures import FIGURES

PROMETHEUS, ALERTMANAGER, VICTORIA_METRICS = "prometheus", "prometheus-alertmanager", "victoria-metrics"
"""Debian's executable names, also the daemons' keys in `Stack`."""

_absent = [exe for exe in (PROMETHEUS, ALERTMANAGER, VICTORIA_METRICS) if shutil.which(exe) is None]
pytestmark = [pytest.mark.monitoring, pytest.mark.skipif(
    bool(_absent),
    reason=f"needs {', '.join(_absent)}: apt-get install -y --no-install-recommends "
           "prometheus prometheus-alertmanager victoria-metrics",
)]

OVERHEAT_FOR_S = 5
"""s an overheated GPU waits before it pages (alerting.overheat_for_s; production: 120 s)."""
SCRAPE_INTERVAL = "1s"
GROUP_WAIT_S = 1
"""s Alertmanager waits before a group's first notification (alerting.group_wait_s; production: 30 s)."""
QUIET_HOLD_S = OVERHEAT_FOR_S + GROUP_WAIT_S + 3
"""s a GPU at 80 C is watched: overheat_for, group_wait and a few evaluations, time to page had the rule matched."""
START_TIMEOUT_S = 20
"""s a daemon may take to answer, and Prometheus to record its first scrape (~6 s here)."""
DELIVERY_TIMEOUT_S = 30
COLD_START_TIMEOUT_S = 40
"""s until the first remote-written samples show in VictoriaMetrics after Prometheus starts (~20 s here)."""
COLD_TIMEOUT_S = 20
"""s a new reading may take to reach VictoriaMetrics (remote_write batches for up to 5 s)."""
ONCALL_TOKEN = "live-test-token"

ALERT = "GpuTemperatureHigh"
NODE = "gpu-a800-11"
MODEL_NAME = "NVIDIA A800-SXM4-80GB"
"""dcgm-exporter's modelName for the node's A800-SXM4-80GB."""




def answering(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    return check


@dataclass
class Notification:
    path: str
    authorization: str | None
    body: dict[str, Any]
    at: float
    """time.monotonic() when it arrived."""


class Recorder(ThreadingHTTPServer):
    """Records every POST: stands in for the on-call bridge and Slack's incoming webhook."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _RecordingHandler)
        self.received: list[Notification] = []
        self.lock = threading.Lock()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_port}{path}"

    def about(self, alert: str, path: str) -> list[Notification]:
        with self.lock:
            return [n for n in self.received if n.path == path and alert in json.dumps(n.body)]


class _RecordingHandler(BaseHTTPRequestHandler):
    server: Recorder

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.received.append(Notification(self.path, self.headers["Authorization"], body, time.monotonic()))
        # Slack answers "ok"; the on-call bridge any 2xx.
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


class FakeDcgmExporter:
    """dcgm-exporter's temperature and utilization gauges, with its labels, for each GPU of one node."""

    def __init__(self, node: str, gpus: int) -> None:
        registry = CollectorRegistry()
        labels = ["Hostname", "gpu", "UUID", "modelName"]
        self.temp = Gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (C).", labels, registry=registry)
        self.util = Gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (%).", labels, registry=registry)
        self.gpu_labels = [{"Hostname": node, "gpu": str(i), "UUID": f"GPU-{node}-{i}", "modelName": MODEL_NAME}
                           for i in range(gpus)]
        for gpu in range(gpus):
            self.set(gpu, temp_c=80, util_pct=50)
        self.server, _ = start_http_server(0, addr="127.0.0.1", registry=registry)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.server_port}"

    def set(self, gpu: int, *, temp_c: float | None = None, util_pct: float | None = None) -> None:
        if temp_c is not None:
            self.temp.labels(**self.gpu_labels[gpu]).set(temp_c)
        if util_pct is not None:
            self.util.labels(**self.gpu_labels[gpu]).set(util_pct)


@dataclass
class Stack:
    site: Site
    exporter: FakeDcgmExporter
    recorder: Recorder
    root: Path
    ports: dict[str, int]
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def url(self, daemon: str, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[daemon]}{path}"

    def start(self, daemon: str, *args: str) -> None:
        with (self.root / f"{daemon}.log").open("wb") as log:
            self.daemons[daemon] = subprocess.Popen([daemon, *args], stdout=log, stderr=subprocess.STDOUT,
                                                    start_new_session=True)

    def wait(self, what: str, check: Callable[[], bool], timeout_s: float) -> None:
        """Like wait_for, but fails at once, with the log's tail, when a daemon has exited."""

        def ready() -> bool:
            for daemon, process in self.daemons.items():
                if process.poll() is not None:
                    tail = (self.root / f"{daemon}.log").read_text()[-2000:]
                    raise AssertionError(f"{daemon} exited {process.returncode} while waiting for {what}:\n{tail}")
            return check()

        wait_for(what, ready, timeout_s)

    def stop(self) -> None:
        """Each daemon by its PID, in reverse start order, waiting for each."""
        stop_all(list(self.daemons.values()))

    def instant(self, daemon: str, query: str, **params: str) -> list[dict[str, Any]]:
        """An instant query through the Prometheus HTTP API, which VictoriaMetrics serves too."""
        url = self.url(daemon, "/api/v1/query?") + urllib.parse.urlencode({"query": query, **params})
        with urllib.request.urlopen(url, timeout=5) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def values(self, daemon: str, query: str, **params: str) -> list[str]:
        return [r["value"][1] for r in self.instant(daemon, query, **params)]


def live_site(recorder: Recorder, secrets_dir: Path) -> Site:
    """The prod site with its on-call bridge and notification secrets on this machine, and its minutes made seconds
    (rule evaluation, the overheat alerts' `for`, Alertmanager's group_wait) so that an alert pages within the test."""
    return parse(with_changes(prod_values(), alerting__oncall_webhook_url=recorder.url("/oncall"),
                              alerting__secrets_dir=str(secrets_dir), alerting__overheat_for_s=OVERHEAT_FOR_S,
                              alerting__group_wait_s=GROUP_WAIT_S, monitoring__rule_evaluation_interval_s=1))


def prometheus_config(exporter: FakeDcgmExporter, ports: dict[str, int]) -> dict[str, Any]:
    # The production write path, on the local VictoriaMetrics.
    cold_path = urllib.parse.urlsplit(COLD_WRITE_URL).path
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL},
        "rule_files": ["rules.yaml"],
        "scrape_configs": [{"job_name": "dcgm-exporter", "static_configs": [{"targets": [exporter.target]}]}],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{ports[ALERTMANAGER]}"]}]}]},
        "remote_write": [{"url": f"http://127.0.0.1:{ports[VICTORIA_METRICS]}{cold_path}"}],
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("monitoring")
    with contextlib.ExitStack() as cleanup:
        recorder = Recorder()
        threading.Thread(target=recorder.serve_forever, daemon=True).start()
        cleanup.callback(recorder.server_close)
        cleanup.callback(recorder.shutdown)
        exporter = FakeDcgmExporter(NODE, gpus=2)
        cleanup.callback(exporter.server.server_close)
        cleanup.callback(exporter.server.shutdown)

        secrets = root / "secrets"
        secrets.mkdir()
        (secrets / SLACK_API_URL_FILE).write_text(recorder.url("/slack"))
        (secrets / ONCALL_TOKEN_FILE).write_text(ONCALL_TOKEN)
        site = live_site(recorder, secrets)
        ports = dict(zip((PROMETHEUS, ALERTMANAGER, VICTORIA_METRICS), free_ports(3), strict=True))
        # The rules and Alertmanager's config as `gpuctl plan --out` writes them; Prometheus' own config is the
        # operator's (kube-prometheus-stack) in the cluster, here one that reaches the local daemons.
        planned = artifacts(site)
        (root / "rules.yaml").write_text(planned[RULES_FILE])
        (root / "alertmanager.yaml").write_text(planned[ALERTMANAGER_FILE])
        (root / "prometheus.yaml").write_text(yaml.safe_dump(prometheus_config(exporter, ports), sort_keys=False))

        s = Stack(site, exporter, recorder, root, ports)
        cleanup.callback(s.stop)
        s.start(VICTORIA_METRICS, f"-storageDataPath={root / 'vm'}",
                f"-httpListenAddr=127.0.0.1:{ports[VICTORIA_METRICS]}",
                f"-retentionPeriod={cold_tier_values(site)['server']['retentionPeriod']}")
        # An empty cluster address keeps Alertmanager from gossiping on 0.0.0.0.
        s.start(ALERTMANAGER, f"--config.file={root / 'alertmanager.yaml'}", f"--storage.path={root / 'am'}",
                f"--web.listen-address=127.0.0.1:{ports[ALERTMANAGER]}", "--cluster.listen-address=")
        retention = prometheus_values(site)["prometheus"]["prometheusSpec"]["retention"]
        s.start(PROMETHEUS, f"--config.file={root / 'prometheus.yaml'}", f"--storage.tsdb.path={root / 'tsdb'}",
                f"--storage.tsdb.retention.time={retention}", f"--web.listen-address=127.0.0.1:{ports[PROMETHEUS]}")
        for daemon, ready in [(VICTORIA_METRICS, "/health"), (ALERTMANAGER, "/-/ready"), (PROMETHEUS, "/-/ready")]:
            s.wait(f"{daemon} ready", answering(s.url(daemon, ready)), START_TIMEOUT_S)
        yield s


def selector(**labels: str) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def test_should_page_oncall_and_the_incident_channel_at_90_c_and_stay_quiet_at_80_c(stack: Stack) -> None:
    site, exporter, recorder = stack.site, stack.exporter, stack.recorder
    exporter.set(1, temp_c=80)
    stack.wait("GPU 1 at 80 C in the recorded series",
               lambda: stack.values(PROMETHEUS, Record.GPU_TEMP + selector(Hostname=NODE, gpu="1")) == ["80"],
               START_TIMEOUT_S)
    quiet_until = time.monotonic() + QUIET_HOLD_S
    while time.monotonic() < quiet_until:
        assert stack.instant(PROMETHEUS, "ALERTS" + selector(alertname=ALERT)) == [], "pending or firing at 80 C"
        assert recorder.about(ALERT, "/oncall") == [], "paged at 80 C"
        time.sleep(0.5)

    exporter.set(1, temp_c=90)
    raised = time.monotonic()
    stack.wait("the page for GPU 1 at 90 C", lambda: bool(recorder.about(ALERT, "/oncall")), DELIVERY_TIMEOUT_S)
    page = recorder.about(ALERT, "/oncall")[0]
    FIGURES.append(f"{ALERT} delivered {page.at - raised:.1f} s after the exporter reported 90 C")

    assert page.authorization == f"Bearer {ONCALL_TOKEN}"
    [alert] = page.body["alerts"]
    assert alert["status"] == "firing"
    assert alert["labels"] == {"alertname": ALERT, "severity": Severity.CRITICAL.value, **exporter.gpu_labels[1]}
    threshold = f"{site.monitoring.gpu_temp_incident_c:g}"
    assert alert["annotations"] == {"summary": f"GPU 1 on {NODE} is at 90.0 C (over {threshold} C)",
                                    "runbook_url": runbook_url(site, ALERT)}
    # GPU 0 stayed at 80 C throughout.
    assert stack.instant(PROMETHEUS, "ALERTS" + selector(alertname=ALERT, Hostname=NODE, gpu="0")) == []
    stack.wait("the incident-channel post", lambda: bool(recorder.about(ALERT, "/slack")), DELIVERY_TIMEOUT_S)
    [post] = recorder.about(ALERT, "/slack")
    assert post.body["channel"] == site.slack.incident_channel
    assert runbook_url(site, ALERT) in post.body["attachments"][0]["text"]


def test_should_copy_recorded_per_gpu_series_to_the_cold_tier(stack: Stack) -> None:
    query = Record.GPU_UTIL + selector(Hostname=NODE, gpu="0")

    def cold() -> list[str]:
        # nocache: VictoriaMetrics otherwise hides the last 30 s (-search.latencyOffset) from instant queries.
        return stack.values(VICTORIA_METRICS, query, nocache="1")

    stack.wait("GPU 0's recorded utilization in VictoriaMetrics", lambda: bool(cold()), COLD_START_TIMEOUT_S)
    # A reading GPU 0 has not had yet, so only a scrape from now on can bring it to the cold tier.
    stack.exporter.set(0, util_pct=42)
    written = time.monotonic()
    stack.wait("GPU 0's new utilization in VictoriaMetrics", lambda: cold() == ["42"], COLD_TIMEOUT_S)
    FIGURES.append(f"{Record.GPU_UTIL} took {time.monotonic() - written:.1f} s from the exporter to the cold tier")
    [series] = stack.instant(VICTORIA_METRICS, query, nocache="1")
    assert series["metric"] == {"__name__": Record.GPU_UTIL, **stack.exporter.gpu_labels[0]}
