"""`gpuctl gateway`, as `pulumi up` runs it: the key on stdout only, the master key only from the environment; a
budget change keeps the team's key, and only `rotate-key` replaces it, with a record in the rollout's audit log."""

import getpass
import hashlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner, Result

from components.inference.values import GATEWAY_PORT, GATEWAY_SERVICE, GATEWAY_URL, NAMESPACE, TEAM_KEY_SECRET
from runbooks.cli import app
from runbooks.exit_codes import ExitCode
from runbooks.gateway.key_secret import KEY_FIELD
from runbooks.stack.audit import AuditLog, audit_key
from tests.builders import parse, prod_values
from tests.runbooks.gateway.admin_double import AdminDouble

FAKE_KUBECTL = Path(__file__).with_name("fake_kubectl.py")

MASTER = "sk-master-cli"


@pytest.fixture
def double() -> Iterator[AdminDouble]:
    served = AdminDouble(MASTER)
    yield served
    served.stop()


def ensure(url: str, env: dict[str, str], budget_usd: str = "500") -> Result:
    return CliRunner().invoke(app, ["gateway", "ensure-team", "--url", url, "--team", "speech", "--budget-usd",
                                    budget_usd, "--budget-days", "30", "--model", "gpt-4o"], env=env)


def test_should_print_only_the_new_key(double: AdminDouble) -> None:
    result = ensure(double.url, {"LITELLM_MASTER_KEY": MASTER})
    assert result.exit_code == ExitCode.DONE, result.output
    assert result.stdout in double.keys and MASTER not in result.output


def test_should_refuse_without_a_master_key_in_the_environment(double: AdminDouble) -> None:
    result = ensure(double.url, {"LITELLM_MASTER_KEY": ""})
    assert result.exit_code == ExitCode.INVALID
    assert "LITELLM_MASTER_KEY is not set" in result.output and not double.calls


def test_should_fail_naming_the_team_when_the_gateway_refuses(double: AdminDouble) -> None:
    result = ensure(double.url, {"LITELLM_MASTER_KEY": "sk-not-it"})
    assert result.exit_code == ExitCode.FAILED
    assert "team speech" in result.output and "sk-not-it" not in result.output


def test_should_remove_a_team_twice_without_failing(double: AdminDouble) -> None:
    ensure(double.url, {"LITELLM_MASTER_KEY": MASTER})
    for said in ("removed", "was not on the gateway"):
        result = CliRunner().invoke(app, ["gateway", "remove-team", "--url", double.url, "--team", "speech"],
                                    env={"LITELLM_MASTER_KEY": MASTER})
        assert result.exit_code == ExitCode.DONE and said in result.output
    assert not double.teams


@pytest.fixture
def kubectl(tmp_path: Path, double: AdminDouble) -> dict[str, str]:
    """A `kubectl` on PATH that port-forwards the gateway's Service (only it) to the admin double."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "kubectl").write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_KUBECTL} \"$@\"\n")
    (bindir / "kubectl").chmod(0o755)
    (tmp_path / "secrets.json").write_text("{}")
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "FAKE_KUBECTL_LOG": str(tmp_path / "kubectl.log"),
            "FAKE_KUBECTL_TARGET": urlsplit(double.url).netloc,
            "FAKE_KUBECTL_SERVICES": f"{NAMESPACE}/{GATEWAY_SERVICE}:{GATEWAY_PORT}",
            "FAKE_KUBECTL_SECRETS": str(tmp_path / "secrets.json")}


def test_should_reach_the_in_cluster_gateway_from_the_pulumi_host_through_a_port_forward(
        double: AdminDouble, kubectl: dict[str, str]) -> None:
    # What the stack runs by default: the Service's in-cluster name, which resolves nowhere outside the cluster.
    assert parse(prod_values()).inference.gateway.admin_url == GATEWAY_URL
    result = ensure(GATEWAY_URL, {"LITELLM_MASTER_KEY": MASTER, **kubectl})
    assert result.exit_code == ExitCode.DONE, result.output
    assert result.stdout in double.keys and "speech" in double.teams
    calls = Path(kubectl["FAKE_KUBECTL_LOG"]).read_text().splitlines()
    assert calls == [json.dumps(["port-forward", "--namespace", NAMESPACE, f"service/{GATEWAY_SERVICE}",
                                 f":{GATEWAY_PORT}", "--address", "127.0.0.1"]), "stopped"]
    removed = CliRunner().invoke(app, ["gateway", "remove-team", "--url", GATEWAY_URL, "--team", "speech"],
                                 env={"LITELLM_MASTER_KEY": MASTER, **kubectl})
    assert removed.exit_code == ExitCode.DONE and not double.teams, removed.output


def test_should_fail_naming_kubectls_error_when_the_service_is_not_there(double: AdminDouble,
                                                                          kubectl: dict[str, str]) -> None:
    result = ensure(f"http://llm-gateway.{NAMESPACE}.svc:{GATEWAY_PORT}", {"LITELLM_MASTER_KEY": MASTER, **kubectl})
    assert result.exit_code == ExitCode.FAILED and not double.calls
    assert ('`port-forward --namespace inference service/llm-gateway :4000 --address 127.0.0.1` failed: error: '
            'services "llm-gateway" not found') in " ".join(result.output.split()), result.output


# A team's key across budget changes and rotations, as `pulumi up` and an operator run gpuctl.

def onboarded(double: AdminDouble, kubectl: dict[str, str]) -> str:
    """The team created as `pulumi up` creates it, its key written where its pods read it (the stack's Secret)."""
    created = ensure(double.url, {"LITELLM_MASTER_KEY": MASTER, **kubectl})
    assert created.exit_code == ExitCode.DONE, created.output
    Path(kubectl["FAKE_KUBECTL_SECRETS"]).write_text(json.dumps({
        f"speech/{TEAM_KEY_SECRET}": {"base-url": GATEWAY_URL, KEY_FIELD: created.stdout}}))
    return created.stdout


def secret_key(kubectl: dict[str, str]) -> str:
    return str(json.loads(Path(kubectl["FAKE_KUBECTL_SECRETS"]).read_text())[f"speech/{TEAM_KEY_SECRET}"][KEY_FIELD])


def rotate(double: AdminDouble, env: dict[str, str], state: Path) -> Result:
    return CliRunner().invoke(app, ["gateway", "rotate-key", "--url", double.url, "--team", "speech",
                                    "--rollout-state-dir", str(state)], env={"LITELLM_MASTER_KEY": MASTER, **env})


def test_should_keep_the_teams_key_when_its_budget_changes(double: AdminDouble, kubectl: dict[str, str]) -> None:
    key = onboarded(double, kubectl)
    # `pulumi up` after the budget was raised: pulumi-command runs `update` with the last stdout in its environment.
    raised = ensure(double.url, {"LITELLM_MASTER_KEY": MASTER, "PULUMI_COMMAND_STDOUT": key, **kubectl}, "900")
    assert raised.exit_code == ExitCode.DONE, raised.output
    assert raised.stdout == key and list(double.keys) == [key], "the key the team's pods hold was revoked"
    assert double.teams["speech"]["max_budget"] == 900.0
    assert "its key kept" in raised.output and key not in raised.stderr


def test_should_rotate_the_key_only_by_its_command_and_audit_it(double: AdminDouble, kubectl: dict[str, str],
                                                                 tmp_path: Path) -> None:
    old = onboarded(double, kubectl)
    rotated = rotate(double, kubectl, tmp_path / "rollout")
    assert rotated.exit_code == ExitCode.DONE, rotated.output
    new = secret_key(kubectl)
    # The pods' Secret holds the new key, the only one the gateway still has, under the team's alias.
    assert new != old and double.keys == {new: {"team_id": "speech", "key_alias": "speech-default",
                                                "models": ["gpt-4o"]}}
    assert old not in rotated.output and new not in rotated.output
    assert not any(k in Path(kubectl["FAKE_KUBECTL_LOG"]).read_text() for k in (old, new)), "a key in kubectl's argv"
    log = AuditLog(tmp_path / "rollout" / "audit.jsonl", audit_key(tmp_path / "rollout"))
    assert log.verify().records == 1
    (record,) = log.records()
    assert (record.what, record.decision, record.who) == ("gateway.rotate_key", "rotated", getpass.getuser())
    assert record.detail == {"team": "speech", "secret": f"speech/{TEAM_KEY_SECRET}", "revoked_keys": 1,
                             "key_sha256": hashlib.sha256(new.encode()).hexdigest()[:12]}
    text = (tmp_path / "rollout" / "audit.jsonl").read_text()
    assert old not in text and new not in text
    # The next `pulumi up` (a budget change) hands back the key the stack printed last, now revoked: the account
    # keeps the rotated one its pods read, and the stack takes it back into its state.
    raised = ensure(double.url, {"LITELLM_MASTER_KEY": MASTER, "PULUMI_COMMAND_STDOUT": old, **kubectl}, "900")
    assert raised.exit_code == ExitCode.DONE, raised.output
    assert raised.stdout == new and list(double.keys) == [new]


def test_should_leave_the_old_key_when_a_rotation_cannot_write_the_new_one(double: AdminDouble,
                                                                           kubectl: dict[str, str],
                                                                           tmp_path: Path) -> None:
    old = ensure(double.url, {"LITELLM_MASTER_KEY": MASTER}).stdout  # no Secret in the team's namespace
    failed = rotate(double, kubectl, tmp_path / "rollout")
    assert failed.exit_code == ExitCode.FAILED
    assert 'secrets "llm-gateway" not found' in failed.output
    assert list(double.keys) == [old], "the team lost its working key, or a new one was left live"
    (record,) = AuditLog(tmp_path / "rollout" / "audit.jsonl", audit_key(tmp_path / "rollout")).records()
    assert (record.what, record.decision, record.detail["team"]) == ("gateway.rotate_key", "failed", "speech")


def test_should_refuse_a_rotation_it_cannot_audit(double: AdminDouble, kubectl: dict[str, str],
                                                  tmp_path: Path) -> None:
    old = onboarded(double, kubectl)
    refused = rotate(double, {**kubectl, "GPUCTL_AUDIT_KEY": "short"}, tmp_path / "rollout")
    assert refused.exit_code == ExitCode.INVALID and "GPUCTL_AUDIT_KEY must be at least" in refused.output
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # anyone could plant a link at audit.jsonl
    refused = rotate(double, kubectl, shared)
    assert refused.exit_code == ExitCode.INVALID and "writable by no one else" in " ".join(refused.output.split())
    assert list(double.keys) == [old] and secret_key(kubectl) == old
