"""A fake Slack Web API on 127.0.0.1: records each call, answers like Slack, and can be scripted to
answer a method with an error (`invalid_auth`, `message_not_found`) or a 429 with Retry-After.

auth.test answers with the identity of the token in the Authorization header, as Slack does (user_id and
team_id; bot_id for a bot token); an unknown token gets `invalid_auth`. A message posted with thread_ts is a
reply in that thread (conversations.replies lists it, with the poster's bot_id), not a message of its own.

slack-sdk's own tests use the same approach: a local HTTP server and WebClient(base_url=...).
"""

import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHANNEL_ID = "C0ROLLOUT"


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    authorized: bool
    """Whether an Authorization header came with it (its value is never kept)."""


@dataclass
class Script:
    status: int = 200
    error: str | None = None
    retry_after_s: int | None = None


@dataclass
class FakeSlack:
    members: set[str] = field(default_factory=set)
    identities: dict[str, dict[str, str]] = field(default_factory=dict)
    """token -> what auth.test says of its owner (the tokens themselves never reach `calls`)."""
    socket_url: str | None = None
    calls: list[Call] = field(default_factory=list)
    scripts: dict[str, list[Script]] = field(default_factory=dict)
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    """ts -> the message as last posted or updated."""
    replies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """thread ts -> the replies posted in it."""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._ts = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/"

    def start(self) -> "FakeSlack":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def script(self, method: str, *answers: Script) -> None:
        with self._lock:
            self.scripts.setdefault(method, []).extend(answers)

    def called(self, method: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.method == method]

    def delete_message(self, ts: str) -> None:
        with self._lock:
            del self.messages[ts]

    def _answer(self, method: str, params: dict[str, Any], token: str | None) -> tuple[int, dict[str, str], Any]:
        identity = self.identities.get(token or "")
        with self._lock:
            self.calls.append(Call(method, params, token is not None))
            queued = self.scripts.get(method)
            scripted = queued.pop(0) if queued else None
            if scripted is not None:
                headers = {"Retry-After": str(scripted.retry_after_s)} if scripted.retry_after_s is not None else {}
                return scripted.status, headers, {"ok": False, "error": scripted.error or "ratelimited"}
            if method == "auth.test":
                if identity is None:
                    return 200, {}, {"ok": False, "error": "invalid_auth"}
                return 200, {}, {"ok": True, "url": "https://institute.slack.com/", "team": "Institute",
                                 "user": "someone", **identity}
            if method == "chat.postMessage":
                self._ts += 1
                ts = f"1700000000.{self._ts:06d}"
                if params.get("thread_ts"):
                    reply = {**params, "ts": ts, "bot_id": (identity or {}).get("bot_id")}
                    self.replies.setdefault(params["thread_ts"], []).append(reply)
                    return 200, {}, {"ok": True, "channel": CHANNEL_ID, "ts": ts, "message": reply}
                self.messages[ts] = params
                return 200, {}, {"ok": True, "channel": CHANNEL_ID, "ts": ts, "message": params}
            if method == "conversations.replies":
                if params.get("ts") not in self.messages:
                    return 200, {}, {"ok": False, "error": "thread_not_found"}
                thread = [{**self.messages[params["ts"]], "ts": params["ts"]}, *self.replies.get(params["ts"], [])]
                return 200, {}, {"ok": True, "messages": thread, "has_more": False}
            if method == "chat.update":
                if params.get("ts") not in self.messages:
                    return 200, {}, {"ok": False, "error": "message_not_found"}
                self.messages[params["ts"]] = params
                return 200, {}, {"ok": True, "channel": params["channel"], "ts": params["ts"]}
            if method == "usergroups.users.list":
                return 200, {}, {"ok": True, "users": sorted(self.members)}
            if method == "apps.connections.open":
                return 200, {}, {"ok": True, "url": self.socket_url}
            return 200, {}, {"ok": False, "error": "unknown_method"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    params = json.loads(body or "{}")
                else:
                    params = {k: v[0] for k, v in urllib.parse.parse_qs(body).items()}
                for key in ("blocks", "attachments"):
                    if isinstance(params.get(key), str):
                        params[key] = json.loads(params[key])
                method = self.path.removeprefix("/api/")
                authorization = self.headers.get("Authorization")
                token = authorization.removeprefix("Bearer ") if authorization else None
                status, headers, answer = fake._answer(method, params, token)
                data = json.dumps(answer).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler
