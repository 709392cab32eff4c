"""A GPU node's daemons as the campaign sees them, one process: a dcgm-exporter's GPU series on /metrics (what
DcgmExporterDown and GpuMissing read) and the node's storage path, PUT/GET/DELETE /hot/<name> (a checkpoint written to
the hot tier, read back as the NVMe cache would, deleted once the storage load keeps newer ones). Standard library only:
it runs inside a network namespace the test made (tests/harness/netns.py), started with `ip netns exec`. With no
HOSTNAME it serves the storage path alone: the hot tier's server side, which a node's checkpoint writes reach over its
link.

    node_agent.py --listen 10.251.7.2:9400 --directory DIR --gpus 8 --model NAME HOSTNAME...
"""

import argparse
import hashlib
import os
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

NAME = re.compile(r"^/hot/([A-Za-z0-9][A-Za-z0-9._-]{0,100})$")
MAX_BODY = 64 << 20
"""Bytes one PUT may carry: a scaled checkpoint chunk, never more."""


def exposition(hosts: list[str], gpus: int, model: str) -> str:
    lines = []
    for metric, value in (("DCGM_FI_DEV_GPU_TEMP", 55), ("DCGM_FI_DEV_GPU_UTIL", 85)):
        lines.append(f"# TYPE {metric} gauge")
        lines += [f'{metric}{{Hostname="{h}",gpu="{g}",UUID="GPU-{h}-{g}",modelName="{model}"}} {value}'
                  for h in hosts for g in range(gpus)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--directory", type=Path, required=True)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--model", default="NVIDIA A800-SXM4-80GB")
    parser.add_argument("--pid-file", type=Path, help="where the agent writes its PID (a drill kills it by it)")
    parser.add_argument("hosts", nargs="*")
    args = parser.parse_args()
    if args.pid_file:
        args.pid_file.write_text(f"{os.getpid()}\n")
    metrics = exposition(args.hosts, args.gpus, args.model).encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def _answer(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's names)
            if self.path == "/metrics":
                self._answer(200, metrics)
                return
            found = NAME.match(self.path)
            path = args.directory / found.group(1) if found else None
            self._answer(200, path.read_bytes()) if path and path.is_file() else self._answer(404, b"")

        def do_PUT(self) -> None:  # noqa: N802 (http.server's names)
            found = NAME.match(self.path)
            size = int(self.headers.get("Content-Length", "0"))
            if not found or not 0 < size <= MAX_BODY:
                self._answer(400, b"")
                return
            body = self.rfile.read(size)
            (args.directory / found.group(1)).write_bytes(body)
            self._answer(201, hashlib.sha256(body).hexdigest().encode())

        def do_DELETE(self) -> None:  # noqa: N802 (http.server's names)
            found = NAME.match(self.path)
            if not found:
                self._answer(400, b"")
                return
            (args.directory / found.group(1)).unlink(missing_ok=True)
            self._answer(200, b"")

    host, port = args.listen.rsplit(":", 1)
    ThreadingHTTPServer((host, int(port)), Handler).serve_forever()


if __name__ == "__main__":
    main()
