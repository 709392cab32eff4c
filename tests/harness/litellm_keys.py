"""The LiteLLM proxy's own command line (`litellm ...`, the image's entry point), with a stand-in for its key database.

In production the teams' keys live in the gateway's PostgreSQL (`gpuctl gateway ensure-team` creates them) and LiteLLM
labels every metric with the team the key belongs to. No database can back the proxy here: LiteLLM's database layer
needs Prisma's native engines, which no registry ships (../shared/notes/litellm-offline.md). So this launcher hands
the proxy a key lookup in the database's place before it starts: LiteLLM's own `user_custom_auth` hook, which it asks
before any database, returns the team id and alias a database key carries. The configuration file is the rendered
one, untouched: the hook is set on the proxy module, not in the config.

Run with the LiteLLM venv's Python: `python litellm_keys.py <litellm's arguments>`; GATEWAY_TEST_KEYS holds
{"<key>": "<team>"} as JSON. Imports nothing of the project (the proxy's venv has none of it).
"""

import json
import os

from fastapi import Request
from litellm.proxy import proxy_server
from litellm.proxy._types import ProxyException, UserAPIKeyAuth
from litellm.proxy.proxy_cli import run_server

KEYS: dict[str, str] = json.loads(os.environ["GATEWAY_TEST_KEYS"])


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    """What the key table answers: the key's team, its id and alias the team's name, as ensure-team makes them."""
    if api_key in KEYS:
        team = KEYS[api_key]
        return UserAPIKeyAuth(api_key=api_key, team_id=team, team_alias=team, key_alias=f"{team}-default")
    raise ProxyException(message="unknown key", type="auth_error", param="api_key", code=401)


# The proxy's config loader sets this global only when the config names a custom_auth, which ours does not.
proxy_server.user_custom_auth = user_api_key_auth
run_server()
