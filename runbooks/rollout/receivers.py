"""Receivers for Approve/Reject clicks: Socket Mode (default) and a signed HTTP endpoint.

Both store the click first, then acknowledge (Slack wants an ack within 3 s), then decide it: a click
Slack has seen acknowledged is always on disk, so a crash after the ack loses no approval (the next
`wait` decides what is pending). Socket Mode needs no inbound port, which suits an on-prem cluster;
its payloads are unsigned because the socket itself is authenticated with the app token. The HTTP
endpoint verifies Slack's v0 signature and timestamp on the raw body, and refuses a request it has
seen before; every refusal is audited. It binds one address (127.0.0.1 by default, behind the TLS ingress), holds at
most MAX_CONNECTIONS connections and closes one silent for READ_TIMEOUT_S: a thousand stalled connections took its
descriptors and kept every genuine click out (issue 41).
"""

import hashlib
import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

from slack_sdk import WebClient
from slack_sdk.signature import Clock, SignatureVerifier
from slack_sdk.socket_mode.builtin import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from hosts.slurm_exporter import BoundedHandler, BoundedHTTPServer
from runbooks.rollout.approvals import SlackApprovals, click_from_payload
from runbooks.rollout.store import Store
from runbooks.stack.audit import AuditLog

INTERACTIONS_PATH = "/slack/interactions"
MAX_TIMESTAMP_SKEW_S = 300
"""seconds; Slack's rule (and SignatureVerifier's) for how old a signed request may be."""
MAX_BODY_BYTES = 64 * 1024
"""bytes; interaction payloads are a few KB, anything larger is refused unread."""
MAX_CONNECTIONS = 64
"""Connections held at once: Slack sends one request per click, and approvers click a few times a stage. Over it, the
oldest connection that has not sent its whole request is closed for the new one."""
READ_TIMEOUT_S = 10.0
"""s a connection may stay silent (before or within its request, or reading the reply) before it is closed; Slack
sends a click at once and gives up after 3 s."""


class ClickInbox:
    """Store a click, then (after the receiver's ack) decide everything pending, one decision at a time."""

    def __init__(self, store: Store, approvals: SlackApprovals, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.approvals = approvals
        self.clock = clock
        self._deciding = threading.Lock()

    def receive(self, payload: dict[str, Any], source: str) -> None:
        click = click_from_payload(payload)
        if click is not None:
            self.store.add_click(**click, source=source, at=self.clock())

    def decide_pending(self) -> None:
        with self._deciding:
            self.approvals.process_pending()


class UnixClock(Clock):
    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now

    def now(self) -> float:
        return self._now()


class HttpReceiver:
    """POST /slack/interactions, bound to 127.0.0.1 by default: put the ingress (TLS) in front of it."""

    def __init__(self, signing_secret: str, inbox: ClickInbox, store: Store, audit: AuditLog,
                 host: str = "127.0.0.1", port: int = 0, now: Callable[[], float] = time.time) -> None:
        self.verifier = SignatureVerifier(signing_secret, clock=UnixClock(now))
        self.inbox, self.store, self.audit, self.now = inbox, store, audit, now
        self.server = BoundedHTTPServer((host, port), self._handler(), MAX_CONNECTIONS, READ_TIMEOUT_S)
        self._thread = threading.Thread(target=self.server.serve_forever, name="slack-http-receiver", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}{INTERACTIONS_PATH}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def refusal(self, body: bytes, timestamp: str, signature: str) -> str | None:
        """Why this request must not be trusted, or None."""
        if not timestamp.isdigit() or not signature:
            return "unsigned request"
        if abs(self.now() - int(timestamp)) > MAX_TIMESTAMP_SKEW_S:
            return "stale timestamp"
        if not self.verifier.is_valid(body, timestamp, signature):
            return "forged signature"
        # A valid signature is only valid for one delivery: the same one again is a replay.
        key = hashlib.sha256(f"{timestamp}:{signature}".encode()).hexdigest()
        if not self.store.first_sighting(key, self.now(), keep_s=2 * MAX_TIMESTAMP_SKEW_S):
            return "replayed request"
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BoundedHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                if self.path != INTERACTIONS_PATH:
                    self.send_error(404)
                    return
                declared = self.headers.get("Content-Length") or ""
                # Digits only: int() would take "-1" (read to the end of the stream) or raise on "abc".
                if not declared.isascii() or not declared.isdigit():
                    self.send_error(400, "Content-Length must be a number of bytes")
                    return
                if int(declared) > MAX_BODY_BYTES:
                    self.send_error(413)
                    return
                body = self.rfile.read(int(declared))
                self.working()
                refusal = receiver.refusal(body, self.headers.get("X-Slack-Request-Timestamp", ""),
                                           self.headers.get("X-Slack-Signature", ""))
                if refusal is not None:
                    # Nothing the sender wrote reaches the audit log unverified: its size and a digest only.
                    receiver.audit.append(
                        who="unverified", what="slack.request", decision="refused",
                        detail={"reason": refusal, "remote": self.client_address[0], "bytes": len(body),
                                "sha256": hashlib.sha256(body).hexdigest()},
                    )
                    self.send_error(401, refusal)
                    return
                receiver.inbox.receive(_payload(body), "http")
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                self.wfile.flush()
                receiver.inbox.decide_pending()

            def log_message(self, format: str, *args: Any) -> None:
                # Request lines go nowhere: the audit log records what matters, and headers carry signatures.
                return

        return Handler


def _payload(body: bytes) -> dict[str, Any]:
    try:
        form = urllib.parse.parse_qs(body.decode(), strict_parsing=False)
        payload = json.loads(form.get("payload", ["{}"])[0])
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return payload if isinstance(payload, dict) else {}


class SocketModeReceiver:
    """slack-sdk's built-in Socket Mode client (no extra dependency): ack each envelope, then decide."""

    def __init__(self, app_token: str, web_client: WebClient, inbox: ClickInbox) -> None:
        self.inbox = inbox
        self.client = SocketModeClient(app_token=app_token, web_client=web_client)
        self.client.socket_mode_request_listeners.append(self._on_request)

    def start(self) -> None:
        self.client.connect()

    def stop(self) -> None:
        self.client.close()

    def _on_request(self, client: Any, request: SocketModeRequest) -> None:
        if request.type == "interactive":
            self.inbox.receive(request.payload, "socket_mode")
        client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
        if request.type == "interactive":
            self.inbox.decide_pending()
