"""The stack's alert rules live, with their durations scaled: a real Prometheus evaluating the rule file the plan
writes for a site whose groups evaluate every second, each `for:` multiplied by a campaign's
time_scale, sending to a real Alertmanager whose API (/api/v2/alerts) the acceptance campaign reads. Both on
127.0.0.1, stopped by PID."""

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from components.site.site import Site
from tests.harness.daemons import PROMETHEUS, free_ports, rules_every_second, stop_all, wait_for

ALERTMANAGER = shutil.which("prometheus-alertmanager")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def scaled(duration: str, scale: float) -> str:
    """A Prometheus duration times `scale`, in whole seconds (at least 1 s)."""
    total = sum(int(n) * UNIT_S[u] for n, u in re.findall(r"(\d+)([smhd])", duration))
    return f"{max(round(total * scale), 1)}s" if total else duration


def scaled_rules(site: Site, scale: float, extra: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    """The rule file `gpuctl plan --out` writes for the site, each `for:` scaled: a campaign's minutes in seconds."""
    groups: dict[str, Any] = yaml.safe_load(rules_every_second(site))
    for group in groups["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = scaled(rule["for"], scale)
    groups["groups"] += list(extra)
    return groups


class AlertingWorld:
    def __init__(self, directory: Path, scrape_targets: list[str], rules: dict[str, Any]) -> None:
        assert PROMETHEUS and ALERTMANAGER, "needs prometheus and prometheus-alertmanager (apt-get install)"
        directory.mkdir(parents=True, exist_ok=True)
        prometheus_port, alertmanager_port = free_ports(2)
        (directory / "alertmanager.yml").write_text(yaml.safe_dump({
            "route": {"receiver": "campaign", "group_wait": "1s"}, "receivers": [{"name": "campaign"}]}))
        (directory / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
        (directory / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
            "rule_files": [str(directory / "rules.yaml")],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]},
            "scrape_configs": [{"job_name": "nodes", "static_configs": [{"targets": scrape_targets}]}]}))
        self.alertmanager_url = f"http://127.0.0.1:{alertmanager_port}"
        self.prometheus_url = f"http://127.0.0.1:{prometheus_port}"
        alertmanager = [ALERTMANAGER, f"--config.file={directory / 'alertmanager.yml'}",
                        f"--storage.path={directory / 'am'}", f"--web.listen-address=127.0.0.1:{alertmanager_port}",
                        "--cluster.listen-address=", "--log.level=warn"]
        # A fired alert reaches Alertmanager when it starts firing, then again every resend delay: 1 m by default,
        # the scaled world's 1 s, so an alert lost to a busy moment is not missing for a whole drill.
        prometheus = [PROMETHEUS, f"--config.file={directory / 'prometheus.yml'}",
                      f"--storage.tsdb.path={directory / 'data'}", "--rules.alert.resend-delay=1s",
                      f"--web.listen-address=127.0.0.1:{prometheus_port}", "--log.level=warn"]
        self.processes = [
            subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=(directory / f"{name}.log").open("w"))
            for name, command in (("alertmanager", alertmanager), ("prometheus", prometheus))]

    def wait_ready(self) -> None:
        """Both answer, and Prometheus sends to the Alertmanager: it applies its static Alertmanager target only
        after its discovery's 5 s update throttle, and drops the alerts that fire before."""
        def ready() -> bool:
            try:
                for url in (f"{self.alertmanager_url}/-/ready", f"{self.prometheus_url}/-/ready"):
                    with urllib.request.urlopen(url, timeout=1) as response:
                        if response.status != 200:
                            return False
                with urllib.request.urlopen(f"{self.prometheus_url}/api/v1/alertmanagers", timeout=1) as response:
                    active = json.load(response)["data"]["activeAlertmanagers"]
                return any(self.alertmanager_url in a["url"] for a in active)
            except (OSError, ValueError, KeyError):
                return False

        wait_for("prometheus to send to alertmanager", ready, 30, interval_s=0.2)

    def stop(self) -> None:
        stop_all(self.processes)
