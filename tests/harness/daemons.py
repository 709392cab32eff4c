"""What every real-daemon test needs: free loopback ports, bounded waits, stopping by PID, a real Prometheus."""

import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from components.site.site import Site
from runbooks.plan.files import RULES_FILE, artifacts


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 now (held open together so none is handed out twice)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [int(s.getsockname()[1]) for s in sockets]
    for s in sockets:
        s.close()
    return ports


def wait_for(what: str, check: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> None:
    """Poll `check` until it holds; past the deadline, fail naming what never happened."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:g} s")
        time.sleep(interval_s)


def stop_all(processes: "Sequence[subprocess.Popen[bytes] | subprocess.Popen[str]]") -> None:
    """Each still-running daemon by its PID, in reverse start order, waiting for each (SIGKILL after 10 s)."""
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


PROMETHEUS = shutil.which("prometheus")
PROMETHEUS_STARTUP_TIMEOUT_S = 20.0


def rules_every_second(site: Site) -> str:
    """The rule file `gpuctl plan --out` writes for a site whose groups evaluate every second (prod's evaluate every
    minute: too slow for a bounded test)."""
    assert site.monitoring.rule_evaluation_interval_s == 1, "a site whose rules evaluate every second"
    return artifacts(site)[RULES_FILE]


class PrometheusServer:
    """The Debian `prometheus` binary on 127.0.0.1 with a 1 s scrape interval (and evaluation interval, for groups
    that set none)."""

    def __init__(self, directory: Path, scrape_configs: list[dict[str, Any]],
                 rules: str | None = None) -> None:
        assert PROMETHEUS is not None, "the prometheus binary is needed (apt-get install prometheus)"
        config: dict[str, Any] = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                  "scrape_configs": scrape_configs}
        if rules is not None:  # the rule file's text, as `gpuctl plan --out` writes it (runbooks/plan/files.py)
            (directory / "rules.yaml").write_text(rules)
            config["rule_files"] = [str(directory / "rules.yaml")]
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        (self.port,) = free_ports(1)
        self.process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={directory / 'prometheus.yml'}", f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=(directory / "prometheus.log").open("w"),
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self) -> None:
        def ready() -> bool:
            assert self.process.poll() is None, "prometheus exited"
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        wait_for("prometheus to be ready", ready, PROMETHEUS_STARTUP_TIMEOUT_S, interval_s=0.2)

    def stop(self) -> None:
        stop_all([self.process])
