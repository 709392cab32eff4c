"""A team's account on the LiteLLM gateway through its admin API, idempotent both ways.

Endpoints and fields are LiteLLM 1.80.5's (litellm/proxy/management_endpoints/team_endpoints.py and
key_management_endpoints.py; request models in litellm/proxy/_types.py): /team/info?team_id (404 when absent),
/team/new and /team/update (TeamBase: team_id, team_alias, max_budget, budget_duration, models), /key/generate
(GenerateKeyRequest: team_id, key_alias, models; answers `key`), /key/delete (KeyRequest: key_aliases), /team/delete
(DeleteTeamRequest: team_ids; it deletes the team's keys too).

The team id and alias are the spec's team name, so the gateway's `team_alias` label is the name the cost rules and
dashboards group by; a key is generated for one team id, so its spend can only be billed to that team.
"""

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

TIMEOUT_S = 30.0


class GatewayError(Exception):
    """The gateway refused or could not be reached; the message names the call and never the master key."""


@dataclass(frozen=True)
class TeamAccount:
    team: str
    budget_usd: float
    budget_days: int
    models: tuple[str, ...]

    @property
    def key_alias(self) -> str:
        return f"{self.team}-default"

    def team_fields(self) -> dict[str, Any]:
        return {"team_id": self.team, "team_alias": self.team, "max_budget": self.budget_usd,
                "budget_duration": f"{self.budget_days}d", "models": list(self.models)}


class GatewayAdmin:
    def __init__(self, url: str, master_key: str) -> None:
        self.url = url.rstrip("/")
        self._master_key = master_key

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(
            f"{self.url}{path}", method=method, data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self._master_key}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return 404, None
            detail = error.read(2000).decode(errors="replace")
            raise GatewayError(f"{method} {path}: HTTP {error.code}: {detail}") from None
        except (urllib.error.URLError, TimeoutError, OSError, json.JSONDecodeError) as error:
            raise GatewayError(f"{method} {path}: the gateway at {self.url} did not answer: {error}") from None

    def ensure(self, account: TeamAccount) -> str:
        """Creates or updates the team, replaces its key, and returns the new key."""
        status, _ = self._call("GET", f"/team/info?team_id={urllib.parse.quote(account.team)}")
        self._call("POST", "/team/update" if status == 200 else "/team/new", account.team_fields())
        # The key is shown once, at generation: a rerun replaces it, so the one in the team's Secret always works.
        self._call("POST", "/key/delete", {"key_aliases": [account.key_alias]})
        _, generated = self._call("POST", "/key/generate", {
            "team_id": account.team, "key_alias": account.key_alias, "models": list(account.models)})
        key = generated.get("key") if isinstance(generated, dict) else None
        if not isinstance(key, str) or not key:
            raise GatewayError("POST /key/generate: the answer has no key")
        return key

    def remove(self, team: str) -> bool:
        """Deletes the team and its keys; False when it was not there."""
        status, _ = self._call("GET", f"/team/info?team_id={urllib.parse.quote(team)}")
        if status == 404:
            return False
        self._call("POST", "/team/delete", {"team_ids": [team]})
        return True
