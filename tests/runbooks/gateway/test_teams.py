"""A team's gateway account, created and removed through LiteLLM's admin API, idempotent both ways."""

from collections.abc import Iterator
from typing import Any

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
    key, new = GatewayAdmin(double.url, MASTER).ensure(SPEECH)
    assert new
    assert double.teams["speech"] == {"team_id": "speech", "team_alias": "speech", "max_budget": 1000.0,
                                      "budget_duration": "30d", "models": ["qwen2-5-72b", "gpt-4o"]}
    assert double.keys[key] == {"team_id": "speech", "key_alias": "speech-default",
                                "models": ["qwen2-5-72b", "gpt-4o"]}


def test_should_update_the_team_in_place_and_keep_the_key_its_workloads_hold(double: AdminDouble) -> None:
    admin = GatewayAdmin(double.url, MASTER)
    first, _ = admin.ensure(SPEECH)
    created = len(double.calls)
    kept, new = admin.ensure(TeamAccount("speech", 5000.0, 7, ("gpt-4o",)), [first])
    assert (kept, new) == (first, False)
    assert double.keys == {first: {"team_id": "speech", "key_alias": "speech-default", "models": ["gpt-4o"]}}
    assert (double.teams["speech"]["max_budget"], double.teams["speech"]["budget_duration"]) == (5000.0, "7d")
    assert double.calls[created:] == [("GET", "/team/info"), ("POST", "/team/update"), ("POST", "/v2/key/info"),
                                      ("POST", "/key/update")]


def test_should_make_a_new_key_only_when_no_key_held_is_live(double: AdminDouble) -> None:
    admin = GatewayAdmin(double.url, MASTER)
    first, _ = admin.ensure(SPEECH)
    del double.keys[first]  # the gateway lost it (a database restored from before the team)
    second, new = admin.ensure(SPEECH, [first])
    assert new and list(double.keys) == [second] != [first]


def test_should_not_take_another_teams_key_written_into_a_teams_secret(double: AdminDouble) -> None:
    admin = GatewayAdmin(double.url, MASTER)
    theirs, _ = admin.ensure(TeamAccount("vision", 1000.0, 30, ("gpt-4o",)))
    ours, new = admin.ensure(SPEECH, [theirs])
    assert new and ours != theirs
    assert double.keys[theirs] == {"team_id": "vision", "key_alias": "vision-default", "models": ["gpt-4o"]}


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


def test_should_never_put_a_key_the_gateway_echoes_into_an_error(double: AdminDouble) -> None:
    admin = GatewayAdmin(double.url, MASTER)
    key, _ = admin.ensure(SPEECH)
    handle = double.handle

    def refusing(method: str, path: str, query: dict[str, list[str]], body: dict[str, Any]) -> tuple[int, Any]:
        # As update_key_fn's 403 does: "User=... is not allowed to update key=<the key> ..."
        if path == "/key/update":
            return 403, {"detail": f"User=u is not allowed to update key={body['key']} to belong to user=v"}
        return handle(method, path, query, body)

    double.handle = refusing  # type: ignore[method-assign]
    with pytest.raises(GatewayError) as refused:
        admin.ensure(SPEECH, [key])
    assert "HTTP 403" in str(refused.value) and "update key=<key>" in str(refused.value)
    assert key not in str(refused.value)
