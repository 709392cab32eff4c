"""Alertmanager routing, proven by amtool: every route delivers to exactly the receivers it names."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from components.monitoring.alertmanager import (
    HEARTBEAT,
    HEARTBEAT_TOKEN_FILE,
    INCIDENT,
    NULL,
    ONCALL,
    ONCALL_TOKEN_FILE,
    PLATFORM,
    SLACK_API_URL_FILE,
    render_alertmanager_config,
    team_receiver,
)
from runbooks.plan.files import ALERTMANAGER_FILE, artifacts
from tests.builders import parse, prod_values, with_changes

AMTOOL = shutil.which("amtool")
needs_amtool = pytest.mark.skipif(
    AMTOOL is None, reason="amtool not installed (apt-get install --no-install-recommends prometheus-alertmanager)"
)

SITE = parse(prod_values())


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "alertmanager.yml"
    path.write_text(artifacts(SITE)[ALERTMANAGER_FILE])  # the bytes `gpuctl plan --out` writes
    return path


def routes_test(config_file: Path, receivers: list[str], labels: dict[str, str]) -> subprocess.CompletedProcess[str]:
    assert AMTOOL is not None
    return subprocess.run(
        [AMTOOL, "config", "routes", "test", f"--config.file={config_file}",
         f"--verify.receivers={','.join(receivers)}", *(f"{k}={v}" for k, v in labels.items())],
        capture_output=True, text=True, timeout=60,
    )


def test_should_wait_for_a_groups_other_alerts_as_long_as_the_site_says() -> None:
    assert yaml.safe_load(artifacts(SITE)[ALERTMANAGER_FILE])["route"]["group_wait"] == "30s"
    quick = parse(with_changes(prod_values(), alerting__group_wait_s=5))
    assert yaml.safe_load(artifacts(quick)[ALERTMANAGER_FILE])["route"]["group_wait"] == "5s"


@needs_amtool
def test_should_pass_amtool_check_config(config_file: Path) -> None:
    assert AMTOOL is not None
    result = subprocess.run([AMTOOL, "check-config", str(config_file)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


ROUTES = [
    pytest.param({"severity": "critical", "alertname": "GpuTemperatureHigh"}, [ONCALL, INCIDENT],
                 id="critical pages on-call and posts to the incident channel"),
    pytest.param({"severity": "critical", "alertname": "GpuXidHardwareError", "team": "speech"}, [ONCALL, INCIDENT],
                 id="critical with a team still goes to on-call, not the team"),
    pytest.param({"severity": "tuning", "alertname": "GpuUtilizationLow"}, [PLATFORM],
                 id="tuning without a team goes to the platform channel"),
    pytest.param({"severity": "warning", "alertname": "GpuThermalThrottling"}, [PLATFORM],
                 id="warning without a team goes to the platform channel"),
    pytest.param({"severity": "tuning", "team": "not-a-team"}, [PLATFORM],
                 id="tuning for an unknown team goes to the platform channel"),
    pytest.param({"alertname": "Watchdog", "severity": "none"}, [HEARTBEAT],
                 id="the always-firing Watchdog beats the dead-man's switch, never the platform channel"),
    pytest.param({"alertname": "InfoInhibitor", "severity": "none"}, [NULL], id="InfoInhibitor reaches no one"),
    pytest.param({"alertname": "KubeJobFailed", "severity": "info"}, [PLATFORM],
                 id="anything else falls to the default route"),
    *[pytest.param({"severity": severity, "team": team.name}, [team_receiver(team.name)],
                   id=f"{severity} for {team.name} goes to {team.slack_channel}")
      for team in SITE.teams for severity in ("tuning", "warning")],
]


@needs_amtool
@pytest.mark.parametrize(("labels", "receivers"), ROUTES)
def test_should_route_to_exactly_these_receivers(config_file: Path, labels: dict[str, str],
                                                 receivers: list[str]) -> None:
    result = routes_test(config_file, receivers, labels)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_amtool
def test_should_fail_the_route_test_for_the_wrong_receiver(config_file: Path) -> None:
    # The check above is only as good as amtool's exit code: a wrong expectation must exit non-zero.
    result = routes_test(config_file, [team_receiver("rl")], {"severity": "tuning", "team": "speech"})
    assert result.returncode == 1, result.stdout


def test_should_read_every_secret_from_a_file_never_inline() -> None:
    config = render_alertmanager_config(SITE)
    text = yaml.safe_dump(config)
    assert config["global"] == {"slack_api_url_file": f"{SITE.alerting.secrets_dir}/{SLACK_API_URL_FILE}"}
    assert "api_url:" not in text and "hooks.slack.com" not in text
    oncall = next(r for r in config["receivers"] if r["name"] == ONCALL)
    auth = oncall["webhook_configs"][0]["http_config"]["authorization"]
    assert auth == {"type": "Bearer", "credentials_file": f"{SITE.alerting.secrets_dir}/{ONCALL_TOKEN_FILE}"}
    heartbeat = next(r for r in config["receivers"] if r["name"] == HEARTBEAT)["webhook_configs"][0]
    assert heartbeat["http_config"]["authorization"]["credentials_file"] == \
        f"{SITE.alerting.secrets_dir}/{HEARTBEAT_TOKEN_FILE}"


def test_should_give_every_team_a_receiver_on_its_own_channel() -> None:
    receivers = {r["name"]: r for r in render_alertmanager_config(SITE)["receivers"]}
    for team in SITE.teams:
        assert receivers[team_receiver(team.name)]["slack_configs"][0]["channel"] == team.slack_channel
    assert receivers[INCIDENT]["slack_configs"][0]["channel"] == SITE.slack.incident_channel


def matches(matcher: str, alertname: str) -> bool:
    """An alertname matcher (=, =~, !~) as Alertmanager applies it: regexes are anchored."""
    found = re.fullmatch(r'alertname(=~|!~|=)"(.*)"', matcher)
    if not found:  # a matcher on another label (severity) says nothing of the alertname
        return False
    op, pattern = found.groups()
    hit = alertname == pattern if op == "=" else re.fullmatch(pattern, alertname) is not None
    return hit if op != "!~" else not hit


@pytest.mark.parametrize(
    ("cause", "symptom", "equal"),
    [
        pytest.param("DcgmExporterDown", "GpuUtilizationLow", ["Hostname"], id="a silent node mutes its GPUs"),
        pytest.param("KubernetesGpuNodeNotReady", "GpuMissing", ["Hostname"], id="a NotReady node mutes its GPUs"),
        pytest.param("GpuXidHardwareError", "GpuThermalThrottling", ["Hostname", "gpu"],
                     id="a hardware XID mutes that GPU's throttling"),
        pytest.param("GpuTemperatureHigh", "GpuThermalThrottling", ["Hostname", "gpu"],
                     id="overheating mutes that GPU's throttling"),
    ],
)
def test_should_inhibit_symptoms_by_their_cause(cause: str, symptom: str, equal: list[str]) -> None:
    rules = render_alertmanager_config(SITE)["inhibit_rules"]
    assert any(
        matches(r["source_matchers"][0], cause) and matches(r["target_matchers"][0], symptom) and r["equal"] == equal
        for r in rules
    )


def test_should_never_let_a_cause_inhibit_itself() -> None:
    for rule in render_alertmanager_config(SITE)["inhibit_rules"]:
        for cause in ("DcgmExporterDown", "KubernetesGpuNodeNotReady", "GpuXidHardwareError", "GpuTemperatureHigh"):
            assert not (matches(rule["source_matchers"][0], cause) and matches(rule["target_matchers"][0], cause))
