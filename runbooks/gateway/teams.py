"""A team's account on the LiteLLM gateway through its admin API, idempotent both ways.

Endpoints and fields are LiteLLM 1.80.5's (litellm/proxy/management_endpoints/team_endpoints.py and
key_management_endpoints.py; request models in litellm/proxy/_types.py): /team/info?team_id (404 when absent; the
team's `team_info.models`), /team/new and /team/update (TeamBase: team_id, team_alias, max_budget, budget_duration,
models), /key/generate (GenerateKeyRequest: team_id, key_alias, models; answers `key`; a key_alias another key has is
refused, 400), /v2/key/info (KeyRequest: keys, in the body, never a URL; answers `info`, a row per key found, with
team_id and key_alias), /key/update (UpdateKeyRequest: key, in the body; 404 when the gateway holds no such key),
/key/delete (KeyRequest: key_aliases), /team/delete (DeleteTeamRequest: team_ids; it deletes the team's keys too).
/key/regenerate would rotate in one call, but 1.80.5 refuses it without an Enterprise licence (regenerate_key_fn), so a
rotation is a new key, then the old one deleted.

The team id and alias are the spec's team name, so the gateway's `team_alias` label is the name the cost rules and
dashboards group by; a key is generated for one team id, so its spend can only be billed to that team.
"""

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
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
        return self.alias(self.team)

    @staticmethod
    def alias(team: str) -> str:
        """The alias of the key the team's workloads hold."""
        return f"{team}-default"

    @staticmethod
    def rotating_alias(team: str) -> str:
        """The new key's alias while a rotation writes it where the workloads read it (LiteLLM's aliases are unique)."""
        return f"{team}-rotating"

    def team_fields(self) -> dict[str, Any]:
        return {"team_id": self.team, "team_alias": self.team, "max_budget": self.budget_usd,
                "budget_duration": f"{self.budget_days}d", "models": list(self.models)}


def _keys_in(body: dict[str, Any] | None) -> list[str]:
    """The team keys a request body carries (its `key`, its `keys`)."""
    if not body:
        return []
    found = [body.get("key"), *(body.get("keys") or [])]
    return [k for k in found if isinstance(k, str) and k]


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
            # LiteLLM's errors may quote the key asked about (update_key_fn's 403 does): never into a log.
            for secret in (self._master_key, *_keys_in(body)):
                detail = detail.replace(secret, "<key>")
            raise GatewayError(f"{method} {path}: HTTP {error.code}: {detail}") from None
        except (urllib.error.URLError, TimeoutError, OSError, json.JSONDecodeError) as error:
            raise GatewayError(f"{method} {path}: the gateway at {self.url} did not answer: {error}") from None

    def ensure(self, account: TeamAccount, held: Iterable[str] = ()) -> tuple[str, bool]:
        """Creates or updates the team (its budget and models in place), and returns its key and whether it is new.
        held: keys the team's workloads may hold, asked in order (lazily): the first the gateway still has is kept,
        its models updated in place, so a budget change revokes nothing. A key is generated only when none is live."""
        status, _ = self._call("GET", f"/team/info?team_id={urllib.parse.quote(account.team)}")
        self._call("POST", "/team/update" if status == 200 else "/team/new", account.team_fields())
        for key in held:
            if key and self._keep(key, account):
                return key, False
        # No key of the team's is live: the one generated replaces any the alias still names (shown only once).
        self._call("POST", "/key/delete", {"key_aliases": [account.key_alias]})
        return self._generate(account.team, account.key_alias, list(account.models)), True

    def _keep(self, key: str, account: TeamAccount) -> bool:
        """Updates the key's models in place; False when the gateway holds no such key, or holds it for another team
        or alias: a team may write its own Secret, so a key read there is trusted only as the team's own."""
        _, found = self._call("POST", "/v2/key/info", {"keys": [key]})
        rows = found.get("info") if isinstance(found, dict) else None
        if not any(isinstance(r, dict) and r.get("team_id") == account.team and r.get("key_alias") == account.key_alias
                   for r in rows or []):
            return False
        self._call("POST", "/key/update", {"key": key, "models": list(account.models)})
        return True

    def _generate(self, team: str, alias: str, models: list[str]) -> str:
        _, generated = self._call("POST", "/key/generate", {"team_id": team, "key_alias": alias, "models": models})
        key = generated.get("key") if isinstance(generated, dict) else None
        if not isinstance(key, str) or not key:
            raise GatewayError("POST /key/generate: the answer has no key")
        return key

    def start_rotation(self, team: str) -> str:
        """A new key for the team, beside the old one (which still works), with the team's models; returns it."""
        status, info = self._call("GET", f"/team/info?team_id={urllib.parse.quote(team)}")
        if status == 404:
            raise GatewayError(f"GET /team/info: team {team} is not on the gateway")
        models = ((info or {}).get("team_info") or {}).get("models") if isinstance(info, dict) else None
        if not isinstance(models, list):
            raise GatewayError("GET /team/info: the answer has no team_info.models")
        self._call("POST", "/key/delete", {"key_aliases": [TeamAccount.rotating_alias(team)]})  # an aborted one's
        return self._generate(team, TeamAccount.rotating_alias(team), [str(m) for m in models])

    def finish_rotation(self, team: str, key: str) -> int:
        """Revokes the team's old key(s) and gives the new one the team's alias; returns how many were revoked."""
        _, deleted = self._call("POST", "/key/delete", {"key_aliases": [TeamAccount.alias(team)]})
        self._call("POST", "/key/update", {"key": key, "key_alias": TeamAccount.alias(team)})
        return len(deleted.get("deleted_keys") or []) if isinstance(deleted, dict) else 0

    def abort_rotation(self, team: str) -> None:
        """Revokes the new key of a rotation that could not be finished; the old key stays."""
        self._call("POST", "/key/delete", {"key_aliases": [TeamAccount.rotating_alias(team)]})

    def remove(self, team: str) -> bool:
        """Deletes the team and its keys; False when it was not there."""
        status, _ = self._call("GET", f"/team/info?team_id={urllib.parse.quote(team)}")
        if status == 404:
            return False
        self._call("POST", "/team/delete", {"team_ids": [team]})
        return True
