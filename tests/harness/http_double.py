"""The plumbing every HTTP test double shares: a threaded server (127.0.0.1 unless told) and JSON answers."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    def log_message(self, *_: Any) -> None:
        pass

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def answer(self, status: int, payload: dict[str, Any] | bytes) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Served:
    """A handler class served until `stop`: on a free loopback port, or at the address given."""

    def __init__(self, handler: type[JsonHandler], address: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.server = ThreadingHTTPServer(address, handler)
        self.url = f"http://{address[0]}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
