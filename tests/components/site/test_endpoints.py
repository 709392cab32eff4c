"""The site's alert endpoints: a placeholder host is refused with the key that holds it, a real one kept."""

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from components.site.endpoints import placeholder
from runbooks.cli import app
from tests.builders import copy_project, parse, problems, prod_values, with_changes


@pytest.mark.parametrize("url", [
    "https://heartbeat.example.internal/gpu-cluster",
    "https://hooks.example.com/alertmanager",
    "https://oncall.test/alertmanager",
    "https://pager.invalid/",
    "http://localhost:8080/alertmanager",
    "http://bridge.localhost/alertmanager",
    "https://HEARTBEAT.EXAMPLE.ORG./beat",
])
def test_should_refuse_a_placeholder_host(url: str) -> None:
    assert placeholder(url)


@pytest.mark.parametrize("url", [
    "https://deadman.ops.internal/api/v1/heartbeat/gpu-cluster-dc1",
    "https://events.pagerduty.com/v2/enqueue",
    "http://oncall-bridge.monitoring.svc:8080/alertmanager",  # in-cluster: gpuctl plan judges it against the render
    "https://examples.ops.internal/",
])
def test_should_accept_a_host_that_may_be_real(url: str) -> None:
    assert placeholder(url) is None


@pytest.mark.parametrize("key", ["oncall_webhook_url", "heartbeat_url", "runbook_base_url"])
def test_should_deny_a_placeholder_endpoint_naming_its_key(key: str) -> None:
    values = prod_values()
    alerting = {**values["alerting"], key: "https://alerts.example.internal/gpu-cluster"}
    (problem,) = problems(with_changes(values, alerting=alerting))
    assert problem.startswith(f"alerting.{key}: ")
    assert "placeholder" in problem and "alerts.example.internal" in problem


@pytest.mark.parametrize("key", ["oncall_webhook_url", "heartbeat_url", "runbook_base_url"])
def test_should_require_the_site_to_name_every_endpoint(key: str) -> None:
    values = prod_values()
    alerting = {k: v for k, v in values["alerting"].items() if k != key}
    assert problems(with_changes(values, alerting=alerting)) == [f"alerting.{key}: required key is missing"]


def test_should_route_prod_alerts_to_the_endpoints_the_site_names() -> None:
    site = parse(prod_values())
    assert site.alerting.heartbeat_url == "https://deadman.ops.internal/api/v1/heartbeat/gpu-cluster-dc1"
    assert site.alerting.oncall_webhook_url.startswith("https://oncall.ops.internal/")


def test_should_exit_2_naming_the_placeholder_key(tmp_path: Path) -> None:
    def heartbeat_placeholder(config: dict[str, Any]) -> None:
        config["gpu-cluster:alerting"]["heartbeat_url"] = "https://heartbeat.example.internal/gpu-cluster"

    project = copy_project(tmp_path, heartbeat_placeholder)
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(project)])
    assert result.exit_code == 2, result.output
    assert "alerting.heartbeat_url" in result.output and "heartbeat.example.internal" in result.output
