"""A team's gateway account, created and removed through LiteLLM's admin API, idempotent both ways."""

from collections.abc import Iterator

import pytest

from runbooks.gateway.teams import GatewayAdmin, GatewayError, TeamAccount
from tests.harness.daemons import free_ports
from tests.runbooks.gateway.admin_double import AdminDouble

MASTER = "sk-master-test"
SPEECH = TeamAccount("speech", 1000.0, 30, ("qwen2-5-72b", "gpt-4o"))


@pytest.fixture
def double() -> Iterator[AdminDouble]:
    served = AdminDouble(MASTER)
    yield served
    served.stop()


def test_should_create_the_team_with_its_budget_and_a_key_billed_to_it(double: AdminDouble) -> None:
    key = GatewayAdmin(double.url, MASTER).ensure(SPEECH)
    assert double.teams["speech"] == {"team_id": "speech", "team_alias": "speech", "max_budget": 1000.0,
                                      "budget_duration": "30d", "models": ["qwen2-5-72b", "gpt-4o"]}
    assert double.keys[key] == {"team_id": "speech", "key_alias": "speech-default",
                                "models": ["qwen2-5-72b", "gpt-4o"]}


def test_should_update_the_team_and_replace_its_key_when_run_again(double: AdminDouble) -> None:
    admin = GatewayAdmin(double.url, MASTER)
    first = admin.ensure(SPEECH)
    second = admin.ensure(TeamAccount("speech", 5000.0, 7, ("gpt-4o",)))
    assert list(double.keys) == [second] != [first]
    assert (double.teams["speech"]["max_budget"], double.teams["speech"]["budget_duration"]) == (5000.0, "7d")
    assert ("POST", "/team/update") in double.calls


def test_should_remove_the_team_and_its_keys_once(double: AdminDouble) -> None:
    admin = GatewayAdmin(double.url, MASTER)
    admin.ensure(SPEECH)
    admin.ensure(TeamAccount("vision", 1000.0, 30, ("gpt-4o",)))
    assert admin.remove("speech") is True
    assert set(double.teams) == {"vision"} and {v["team_id"] for v in double.keys.values()} == {"vision"}
    assert admin.remove("speech") is False


def test_should_name_the_call_and_never_the_master_key_when_refused(double: AdminDouble) -> None:
    with pytest.raises(GatewayError) as refused:
        GatewayAdmin(double.url, "sk-wrong").ensure(SPEECH)
    assert "GET /team/info" in str(refused.value) and "HTTP 401" in str(refused.value)
    assert "sk-wrong" not in str(refused.value)
    (closed,) = free_ports(1)
    with pytest.raises(GatewayError, match="did not answer"):
        GatewayAdmin(f"http://127.0.0.1:{closed}", MASTER).remove("speech")
