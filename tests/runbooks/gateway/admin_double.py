"""LiteLLM's admin API as its 1.80.5 source answers it (litellm/proxy/management_endpoints), over an in-memory
database: the real proxy needs Prisma's engines to keep teams and keys, which cannot be fetched here
(../shared/notes/litellm-offline.md). Only the master key may call it, as on the real proxy. As there, a key alias
is unique (_enforce_unique_key_alias: 400), a key is found by its value or its sha256 (hash_token), /key/update of a
key not held is 404, and /v2/key/info answers a row per key found."""

import hashlib
import json
import secrets
import urllib.parse
from typing import Any

from tests.harness.http_double import JsonHandler, Served


class AdminDouble(Served):
    def __init__(self, master_key: str) -> None:
        self.teams: dict[str, dict[str, Any]] = {}
        self.keys: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        double = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's names)
                self._route("GET")

            def do_POST(self) -> None:  # noqa: N802 (http.server's names)
                self._route("POST")

            def _route(self, method: str) -> None:
                if self.headers.get("Authorization") != f"Bearer {master_key}":
                    return self.answer(401, {"error": {"message": "Authentication Error"}})
                path, _, query = self.path.partition("?")
                double.calls.append((method, path))
                self.answer(*double.handle(method, path, urllib.parse.parse_qs(query),
                                           json.loads(self.read_body() or b"{}")))

        super().__init__(Handler)

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: dict[str, Any]) -> tuple[int, Any]:
        if (method, path) == ("GET", "/team/info"):
            team = self.teams.get(query.get("team_id", [""])[0])
            return (200, {"team_id": team["team_id"], "team_info": team}) if team else (
                404, {"detail": {"message": "Team not found"}})
        if (method, path) == ("POST", "/team/new"):
            if body["team_id"] in self.teams:
                return 400, {"detail": {"error": "Team id already exists"}}
            self.teams[body["team_id"]] = dict(body)
            return 200, body
        if (method, path) == ("POST", "/team/update"):
            self.teams[body["team_id"]].update(body)
            return 200, {"data": self.teams[body["team_id"]]}
        if (method, path) == ("POST", "/key/generate"):
            if body.get("team_id") not in self.teams:
                return 400, {"detail": {"error": "team not found"}}
            if self._alias_taken(body.get("key_alias")):
                return 400, {"error": {"message": f"Key with alias '{body['key_alias']}' already exists."}}
            key = "sk-" + secrets.token_hex(8)
            self.keys[key] = dict(body)
            return 200, {"key": key, **body}
        if (method, path) == ("POST", "/v2/key/info"):
            found = [k for k in map(self._held, body.get("keys") or []) if k is not None]
            return 200, {"key": body.get("keys"), "info": [
                {"token": hashlib.sha256(k.encode()).hexdigest(), **self.keys[k]} for k in found]}
        if (method, path) == ("POST", "/key/update"):
            key = self._held(body.get("key", ""))
            if key is None:
                return 404, {"detail": {"error": "Team not found, passed team_id=None"}}
            if self._alias_taken(body.get("key_alias"), but=key):
                return 400, {"error": {"message": f"Key with alias '{body['key_alias']}' already exists."}}
            self.keys[key].update({k: v for k, v in body.items() if k != "key"})
            return 200, {"key": body["key"], **self.keys[key]}
        if (method, path) == ("POST", "/key/delete"):
            gone = [k for k, v in self.keys.items() if v.get("key_alias") in body.get("key_aliases", [])]
            for key in gone:
                del self.keys[key]
            return (200, {"deleted_keys": gone}) if gone else (404, {"detail": {"message": "no such key"}})
        if (method, path) == ("POST", "/team/delete"):
            for team in body["team_ids"]:
                self.teams.pop(team, None)
                for key in [k for k, v in self.keys.items() if v.get("team_id") == team]:
                    del self.keys[key]
            return 200, {"deleted_teams": body["team_ids"]}
        return 404, {"detail": "Not Found"}

    def _held(self, key: str) -> str | None:
        """The key held under this value or its sha256, as LiteLLM looks a key up."""
        return next((k for k in self.keys if key in (k, hashlib.sha256(k.encode()).hexdigest())), None)

    def _alias_taken(self, alias: str | None, but: str | None = None) -> bool:
        return alias is not None and any(v.get("key_alias") == alias for k, v in self.keys.items() if k != but)
