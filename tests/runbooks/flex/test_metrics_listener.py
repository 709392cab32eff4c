"""The lending controller's /metrics against 2,000 idle connections, through its real entry point (`gpuctl flex
control`, run as the unit runs it, with a service's descriptor limit): it still answers and still decides (issue 41).
Slurm and kubectl are stand-ins on PATH answering an idle pool; Prometheus is a closed port (no data: it holds)."""

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from components.monitoring.lending_metrics import LAST_DECISION
from runbooks.flex.controller import AUDIT
from tests.builders import REPO, copy_project
from tests.harness.daemons import free_ports, stop_all, wait_for
from tests.harness.idle_connections import as_a_service, idle_connections

IDLE = 2000
ANSWER_WITHIN_S = 5.0
"""s a scrape may take while the idle connections are held (Prometheus's scrape_timeout is 10 s)."""

STANDINS = {
    "scontrol": 'echo "NodeName=$5 Arch=x86_64 State=IDLE Partitions=a800-flex"',
    "squeue": "exit 0",
    "kubectl": "exit 0",
}


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=ANSWER_WITHIN_S) as response:
        return str(response.read().decode())


def decisions(state: Path) -> int:
    audit = state / AUDIT
    return len(audit.read_text().splitlines()) if audit.exists() else 0


def test_should_answer_metrics_and_keep_deciding_while_2000_idle_connections_are_held(
        tmp_path: Path, report_figure: Callable[[str], None]) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in STANDINS.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / name).chmod(0o755)
    port, closed = free_ports(2)
    project = copy_project(tmp_path, lambda config: config["gpu-cluster:lending"].update({
        "interval_s": 1, "prometheus_url": f"http://127.0.0.1:{closed}"}))
    state = tmp_path / "state"
    gpuctl = Path(sys.executable).parent / "gpuctl"
    log = (tmp_path / "controller.log").open("w")
    controller = subprocess.Popen(
        # The site's address (lending.metrics_address) is the controller's on the cluster network: here, loopback.
        [str(gpuctl), "flex", "--project-dir", str(project), "control", "--dry-run", "--listen", "127.0.0.1",
         "--port", str(port), "--state-dir", str(state)],
        # The code of this tree, whatever checkout the virtual environment was installed from.
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)},
        stdout=log, stderr=subprocess.STDOUT, preexec_fn=as_a_service, start_new_session=True)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_for("the controller's first decision", lambda: decisions(state) >= 1, timeout_s=30)
        with idle_connections("127.0.0.1", port, IDLE) as connected:
            assert connected > 1024  # more than a service's descriptors: the holder was not stopped short
            started = time.monotonic()
            body = scrape(url)
            answered_s = time.monotonic() - started
            seen = decisions(state)
            wait_for("two more decisions", lambda: decisions(state) >= seen + 2, timeout_s=10)
            assert controller.poll() is None, (tmp_path / "controller.log").read_text()[-2000:]
        report_figure(f"flex controller /metrics with {connected} of {IDLE} idle connections held: answered in "
                      f"{answered_s * 1000:.0f} ms, {decisions(state) - seen} decisions meanwhile")
        assert f"{LAST_DECISION} " in body and json.loads((state / AUDIT).read_text().splitlines()[-1])["mode"] == (
            "dry-run")
        # The one address given, not every interface.
        assert f"127.0.0.1:{port}" in subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                                                     text=True, timeout=10).stdout
    finally:
        stop_all([controller])
        log.close()
