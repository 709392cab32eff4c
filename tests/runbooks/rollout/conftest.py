"""Fixtures: a fake clock, the fake Slack Web API and Socket Mode endpoint, the fake Pulumi CLI, and two
real Prometheus worlds (healthy, unhealthy) shared by the session."""

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from components.site.site import Site
from runbooks.rollout import cli
from runbooks.rollout.approvals import SlackApprovals, web_client
from runbooks.rollout.gates import PrometheusGates
from runbooks.rollout.machine import REQUIRED_CRITERIA, RolloutMachine
from runbooks.rollout.receivers import ClickInbox
from runbooks.rollout.store import Store
from runbooks.stack import deploy
from runbooks.stack.audit import ACCEPTANCE_RECORD, AuditLog
from runbooks.stack.deploy import StackDeployer
from runbooks.stack.lock import StackLock
from tests.builders import REPO, parse, prod_values, with_changes
from tests.harness.prometheus_world import HEALTHY, UNHEALTHY, PrometheusWorld
from tests.runbooks.rollout.fake_pulumi import FakePulumiCommand
from tests.runbooks.rollout.fake_slack import CHANNEL_ID, FakeSlack
from tests.runbooks.rollout.fake_socket_mode import FakeSocketMode

BOT_TOKEN = "xoxb-test-bot-token-never-printed"
USER_TOKEN = "xoxp-test-requester-token-never-printed"
"""The requester's own Slack user token: auth.test says it is REQUESTER's."""
APP_TOKEN = "xapp-test-app-token-never-printed"
SIGNING_SECRET = "test-signing-secret-never-printed"
AUDIT_KEY = "test-audit-key-never-printed-0123456789abcdef"
SECRETS = (BOT_TOKEN, USER_TOKEN, APP_TOKEN, SIGNING_SECRET, AUDIT_KEY)
REQUESTER = "U0REQUESTER"
APPROVERS = ("U0ALICE", "U0BOB", "U0CAROL")
BOT_USER, BOT_ID = "U0GPUCTLBOT", "B0GPUCTL"
GATE_WINDOW_MINUTES = 0.25
"""15 s: the fake exporter's counters give rate() data within seconds of the first scrape."""
WORLDS_TIMEOUT_S = 45.0
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
"""When canary went live in these tests."""


class FakeClock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def rollout_site(prometheus_url: str = "http://127.0.0.1:9", **changes: Any) -> Site:
    # Rules evaluated every second: a bounded gate test.
    values = with_changes(prod_values(), **{"monitoring__rule_evaluation_interval_s": 1, **changes})
    values["rollout"] = {"prometheus_url": prometheus_url, "gate_window_minutes": GATE_WINDOW_MINUTES,
                         **values.get("rollout", {})}
    return parse(values)


WORKSPACE_ID, APP_ID = rollout_site().slack.workspace_id, rollout_site().slack.app_id
"""The prod site's Slack workspace and app: where genuine clicks come from."""


@dataclass
class Worlds:
    healthy: PrometheusWorld
    unhealthy: PrometheusWorld


@pytest.fixture(scope="session")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worlds]:
    site = rollout_site()
    started = [PrometheusWorld(site, HEALTHY, tmp_path_factory.mktemp("healthy"))]
    try:
        started.append(PrometheusWorld(site, UNHEALTHY, tmp_path_factory.mktemp("unhealthy")))
        healthy, unhealthy = started
        healthy.wait_ready()
        unhealthy.wait_ready()
        _wait_until_conclusive(site, healthy, unhealthy)
        yield Worlds(healthy, unhealthy)
    finally:
        for world in started:
            world.stop()


def _wait_until_conclusive(site: Site, healthy: PrometheusWorld, unhealthy: PrometheusWorld) -> None:
    """Until the healthy world passes every gate and the unhealthy one has its alert firing and its rates."""
    deadline = time.monotonic() + WORLDS_TIMEOUT_S
    good = PrometheusGates(healthy.url, site.rollout.gates, GATE_WINDOW_MINUTES)
    bad = PrometheusGates(unhealthy.url, site.rollout.gates, GATE_WINDOW_MINUTES)
    while time.monotonic() < deadline:
        verdicts = {r.gate: r.verdict.value for r in bad.check().results}
        if good.check().passed and verdicts["critical_alerts"] == "fail" and verdicts["inference_error_rate"] == "fail":
            return
        time.sleep(0.5)
    raise TimeoutError(f"the Prometheus worlds were not conclusive within {WORLDS_TIMEOUT_S} s: "
                       f"healthy {good.check().as_record()}, unhealthy {bad.check().as_record()}")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START + timedelta(days=15))


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack(members={REQUESTER, *APPROVERS}, identities={
        BOT_TOKEN: {"user_id": BOT_USER, "bot_id": BOT_ID, "team_id": WORKSPACE_ID},
        USER_TOKEN: {"user_id": REQUESTER, "team_id": WORKSPACE_ID},
    }).start()
    yield fake
    fake.stop()


@pytest.fixture
def socket_mode(slack: FakeSlack) -> Iterator[FakeSocketMode]:
    server = FakeSocketMode().start()
    slack.socket_url = server.url
    yield server
    server.stop()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    for name in ("Pulumi.yaml", "Pulumi.prod.yaml"):
        shutil.copy(REPO / name, directory / name)
    return directory


@dataclass
class Harness:
    site: Site
    pulumi: FakePulumiCommand
    slack: FakeSlack
    clock: FakeClock
    state_dir: Path
    store: Store = field(init=False)
    audit: AuditLog = field(init=False)
    machine: RolloutMachine = field(init=False)

    def __post_init__(self) -> None:
        self.build()
        self.accept()

    def accept(self, time_scale: float = 1.0, failed: tuple[str, ...] = (), **measured: Any) -> None:
        """A passed acceptance campaign for the deployed stack, as `gpuctl acceptance run` records it (every criterion
        the gate needs, `failed` ones not passed; the spec's full durations unless `measured` says otherwise): no
        stage is requested without one."""
        spec = self.site.acceptance
        names = [*REQUIRED_CRITERIA, *(f"soak drill:{name}" for name, _ in spec.named_drills())]
        criteria = [{"phase": n.split(" ", 1)[0], "name": n.split(" ", 1)[1], "passed": n not in failed,
                     "measured": "as the test says", "objective": "met", "source": "the test"} for n in names]
        full = {"soak_s": spec.soak_h * 3600.0, "shock_s": spec.shock_minutes * 60.0,
                "drill_hold_s": {name: float(d.hold_s) for name, d in spec.named_drills()}}
        self.audit.append(who="gpuctl acceptance", what=ACCEPTANCE_RECORD, decision="passed", stage="canary",
                          plan_digest=self.machine.deployer.deployment_digest(),
                          detail={"campaign": f"campaign-at-{time_scale:g}", "time_scale": time_scale,
                                  "criteria": criteria, "measured": {**full, **measured}}, at=self.clock())

    def build(self) -> RolloutMachine:
        """A fresh RolloutMachine over the same state: what a restarted `gpuctl rollout` process gets."""
        if hasattr(self, "store"):
            self.store.close()
        self.store = Store(self.state_dir / "rollout.sqlite")
        self.audit = AuditLog(self.state_dir / "audit.jsonl", AUDIT_KEY.encode(), self.store)
        deployer = StackDeployer(self._stack(), self.site.rollout.policy_pack)
        gates = PrometheusGates(self.site.rollout.prometheus_url, self.site.rollout.gates,
                                self.site.rollout.gate_window_minutes, self.clock)
        machine = RolloutMachine(self.site, self.store, self.audit, deployer, gates, None, self.state_dir / "plans",
                          self.clock, StackLock(self.state_dir / "prod.lock"))
        machine.approvals = SlackApprovals(web_client(BOT_TOKEN, self.slack.base_url), self.site.slack, self.store,
                                           self.audit, self.clock, machine.teams_of)
        self.machine = machine
        return machine

    def _stack(self) -> Any:
        return StackDeployer.open(self.project_dir, "prod", self.site.rollout.policy_pack, self.pulumi).stack

    @property
    def project_dir(self) -> Path:
        return self.state_dir.parent / "project"

    @property
    def approvals(self) -> SlackApprovals:
        assert self.machine.approvals is not None
        return self.machine.approvals

    def inbox(self) -> ClickInbox:
        return ClickInbox(self.store, self.approvals, self.clock)

    def click(self, user: str, action: str = "approve", value: dict[str, Any] | None = None) -> None:
        """A click delivered straight to the inbox (the transports have their own tests)."""
        inbox = self.inbox()
        inbox.receive(block_actions(self.slack, user, action, value), "test")
        inbox.decide_pending()


def button_value(slack: FakeSlack) -> dict[str, Any]:
    """The Approve button's value on the newest message that still has buttons."""
    for message in reversed(list(slack.messages.values())):
        for block in message.get("blocks", []):
            if block.get("type") == "actions":
                return dict(json.loads(block["elements"][0]["value"]))
    raise AssertionError("no message with buttons")


_action_ts = [0]


def block_actions(slack: FakeSlack, user: str, action: str, value: dict[str, Any] | None = None) -> dict[str, Any]:
    _action_ts[0] += 1
    return {
        "type": "block_actions", "user": {"id": user, "team_id": WORKSPACE_ID}, "team": {"id": WORKSPACE_ID},
        "api_app_id": APP_ID, "channel": {"id": CHANNEL_ID, "name": "gpu-rollout"},
        "container": {"type": "message", "channel_id": CHANNEL_ID, "is_ephemeral": False},
        "actions": [{"action_id": action, "block_id": "rollout-decision",
                     "value": json.dumps(value if value is not None else button_value(slack)),
                     "action_ts": f"1700000100.{_action_ts[0]:06d}"}],
    }


@pytest.fixture
def harness(tmp_path: Path, project: Path, slack: FakeSlack, clock: FakeClock, worlds: Worlds) -> Iterator[Harness]:
    site = rollout_site(worlds.healthy.url)
    pulumi = FakePulumiCommand(clock, deployed_stage="canary", deployed_at=START)
    made = Harness(site, pulumi, slack, clock, tmp_path / "state")
    yield made
    made.store.close()


@pytest.fixture
def gpuctl(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> Harness:
    """The harness, with `gpuctl rollout` (run through `run`) pointed at the same fakes, clock and key."""
    stack_file = harness.project_dir / "Pulumi.prod.yaml"
    stack = yaml.safe_load(stack_file.read_text())
    stack["config"]["gpu-cluster:rollout"] = {"prometheus_url": harness.site.rollout.prometheus_url,
                                              "gate_window_minutes": GATE_WINDOW_MINUTES}
    stack_file.write_text(yaml.safe_dump(stack))
    monkeypatch.setattr(deploy, "pulumi_command", lambda: harness.pulumi)
    monkeypatch.setattr(cli, "now", harness.clock)
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SLACK_USER_TOKEN", USER_TOKEN)
    monkeypatch.setenv("GPUCTL_AUDIT_KEY", AUDIT_KEY)
    monkeypatch.setenv("SLACK_API_URL", harness.slack.base_url)
    return harness


def run(harness: Harness, *args: str, state_dir: Path | None = None) -> tuple[int, str]:
    """`gpuctl rollout --project-dir <project> --state-dir <state> ARGS`: exit code and all it printed (no secret)."""
    result = CliRunner().invoke(cli.app, ["--project-dir", str(harness.project_dir), "--state-dir",
                                          str(state_dir or harness.state_dir), *args])
    text = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert not any(secret in text for secret in SECRETS)
    return result.exit_code, text
