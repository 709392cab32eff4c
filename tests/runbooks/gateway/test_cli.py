"""`gpuctl gateway`, as `pulumi up` runs it: the key on stdout only, the master key only from the environment."""

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner, Result

from components.inference.values import GATEWAY_PORT, GATEWAY_SERVICE, GATEWAY_URL, NAMESPACE
from runbooks.cli import app
from runbooks.exit_codes import ExitCode
from tests.builders import parse, prod_values
from tests.runbooks.gateway.admin_double import AdminDouble

FAKE_KUBECTL = Path(__file__).with_name("fake_kubectl.py")

MASTER = "sk-master-cli"


@pytest.fixture
def double() -> Iterator[AdminDouble]:
    served = AdminDouble(MASTER)
    yield served
    served.stop()


def ensure(url: str, env: dict[str, str]) -> Result:
    return CliRunner().invoke(app, ["gateway", "ensure-team", "--url", url, "--team", "speech", "--budget-usd", "500",
                                    "--budget-days", "30", "--model", "gpt-4o"], env=env)


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
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "FAKE_KUBECTL_LOG": str(tmp_path / "kubectl.log"),
            "FAKE_KUBECTL_TARGET": urlsplit(double.url).netloc,
            "FAKE_KUBECTL_SERVICES": f"{NAMESPACE}/{GATEWAY_SERVICE}:{GATEWAY_PORT}"}


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
