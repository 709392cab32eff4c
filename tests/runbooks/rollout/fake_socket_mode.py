"""A Socket Mode endpoint on 127.0.0.1: greets with `hello`, pushes `interactive` envelopes, collects acks.

slack-sdk's built-in client connects to whatever apps.connections.open returns; the fake Web API returns
this server's ws:// URL (a port other than 443 makes the client skip TLS, as in slack-sdk's own tests).
"""

import json
import queue
import threading
import uuid
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve


class FakeSocketMode:
    def __init__(self) -> None:
        self.acks: queue.Queue[str] = queue.Queue()
        self.connected = threading.Event()
        self._connection: ServerConnection | None = None
        self.server: Server = serve(self._session, "127.0.0.1", 0)
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.server.socket.getsockname()[1]}/link"

    def start(self) -> "FakeSocketMode":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self._thread.join(timeout=5)

    def push(self, payload: dict[str, Any], timeout_s: float = 10) -> str:
        """Deliver an interaction; returns its envelope id."""
        assert self.connected.wait(timeout_s), "the Socket Mode client never connected"
        assert self._connection is not None
        envelope = str(uuid.uuid4())
        self._connection.send(json.dumps({"envelope_id": envelope, "type": "interactive", "payload": payload,
                                          "accepts_response_payload": False, "retry_attempt": 0,
                                          "retry_reason": ""}))
        return envelope

    def wait_ack(self, envelope: str, timeout_s: float = 10) -> None:
        while True:
            if self.acks.get(timeout=timeout_s) == envelope:
                return

    def _session(self, connection: ServerConnection) -> None:
        connection.send(json.dumps({"type": "hello", "num_connections": 1,
                                    "connection_info": {"app_id": "A0ROLLOUT"}}))
        self._connection = connection
        self.connected.set()
        try:
            for message in connection:
                data = json.loads(message)
                if "envelope_id" in data:
                    self.acks.put(data["envelope_id"])
        except ConnectionClosed:
            pass  # slack-sdk's client closes the socket without a close frame when the receiver stops
        finally:
            self.connected.clear()
            self._connection = None
