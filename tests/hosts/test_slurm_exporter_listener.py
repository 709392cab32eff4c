"""The Slurm exporter's /metrics as its unit runs it (the file the stack ships, a service's descriptor limit) against
2,000 idle connections: it still answers, on loopback unless told another address (issue 41)."""

import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable

from tests.builders import REPO
from tests.harness.daemons import free_ports, stop_all, wait_for
from tests.harness.idle_connections import as_a_service, idle_connections

IDLE = 2000


def answers(url: str, timeout_s: float) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return str(response.read().decode())
    except OSError:
        return None


def test_should_answer_metrics_while_2000_idle_connections_are_held(report_figure: Callable[[str], None]) -> None:
    (port,) = free_ports(1)
    # Slurm is absent here: each poll fails and is counted, which /metrics serves like any other sample.
    exporter = subprocess.Popen([sys.executable, str(REPO / "hosts" / "slurm_exporter.py"), "--port", str(port),
                                 "--interval", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=as_a_service, start_new_session=True)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_for("the exporter to answer", lambda: answers(url, 1) is not None, timeout_s=10)
        with idle_connections("127.0.0.1", port, IDLE) as connected:
            assert connected > 1024  # more than a service's descriptors: the holder was not stopped short
            started = time.monotonic()
            body = answers(url, 5)
            took = time.monotonic() - started
            assert exporter.poll() is None
        assert body is not None and "slurm_exporter_errors_total" in body
        report_figure(f"slurm exporter /metrics with {connected} of {IDLE} idle connections held: answered in "
                      f"{took * 1000:.0f} ms")
        listening = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True,
                                   timeout=10).stdout
        assert f"127.0.0.1:{port} " in listening, listening
    finally:
        stop_all([exporter])
