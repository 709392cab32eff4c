"""`gpuctl gateway`, as `pulumi up` runs it: the key on stdout only, the master key only from the environment."""

from collections.abc import Iterator

import pytest
from typer.testing import CliRunner, Result

from runbooks.cli import app
from runbooks.exit_codes import ExitCode
from tests.runbooks.gateway.admin_double import AdminDouble

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
