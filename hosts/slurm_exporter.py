"""Slurm's scheduler state as Prometheus metrics: nodes per state, and how long jobs waited to start.

Runs on the Slurm controller as a systemd service (installed by components/slurm/component.py), so: Python 3.10+,
standard library only, no project imports. Every --interval seconds it asks Slurm (`sinfo`, `sacct`); /metrics
serves the last snapshot, so a scrape never waits on Slurm. Metrics:

- slurm_nodes_<state> (alloc, comp, down, drain, fail, idle, maint, mix, resv, other): nodes in each base state,
  named as vpenso/prometheus-slurm-exporter names them (the alert rules read down, drain and fail).
- slurm_job_queue_wait_seconds{partition, qos}: a histogram of each job start's wait since submission, from
  sacct, so a job that starts and ends between two polls is counted too (what the rollout's training-queue gate
  reads). Only starts in the whole seconds after the exporter started are counted (sacct gives whole seconds); a
  requeued job's new start counts again.
- slurm_job_account{slurmjobid, account}: 1 for each running job, from squeue; joins the DCGM exporter's `hpc_job`
  label (the job id the prolog writes) to the team that owns the GPU.
- slurm_exporter_last_success_timestamp_seconds, slurm_exporter_errors_total: whether the poll works.

/metrics listens on --listen (loopback unless the unit names the address Prometheus scrapes) and holds at most
METRICS_MAX_CONNECTIONS connections, each closed after LISTENER_TIMEOUT_S without a request: BoundedHTTPServer.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMMAND_TIMEOUT_S = 30.0
WAIT_BUCKETS = (60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400)
"""Seconds: a minute to a day; the gate's threshold (an hour by default) falls on a bucket edge."""
NODE_STATES = ("alloc", "comp", "down", "drain", "fail", "idle", "maint", "mix", "resv", "other")
# sinfo %T long state names, by the base state vpenso's exporter counts them under; a state may end in a flag
# character (* not responding, ~ powered off, # powering up, ! powering down, % powered down, $ maintenance
# reservation, @ reboot pending, ^ reboot issued, - planned), stripped before lookup.
STATE_OF = {
    "allocated": "alloc", "completing": "comp", "down": "down", "drained": "drain", "draining": "drain",
    "drain": "drain", "fail": "fail", "failing": "fail", "idle": "idle", "maint": "maint", "mixed": "mix",
    "reserved": "resv",
}
SACCT_TIME = "%Y-%m-%dT%H:%M:%S"
LOOKBACK_S = 3600
"""How far back each poll re-reads job starts."""
METRICS = (*(f"slurm_nodes_{state}" for state in NODE_STATES),
           *(f"slurm_job_queue_wait_seconds{suffix}" for suffix in ("_bucket", "_sum", "_count")),
           "slurm_job_account", "slurm_exporter_last_success_timestamp_seconds", "slurm_exporter_errors_total")
"""Every sample name /metrics serves (gpuctl plan checks that what the rules read is among them)."""

METRICS_MAX_CONNECTIONS = 16
"""Connections /metrics holds at once: Prometheus scrapes over one per target, an operator's curl takes another."""
LISTENER_TIMEOUT_S = 10.0
"""s a connection may stay silent (before its request, or reading a reply) before it is closed: Prometheus's default
scrape_timeout, and a scrape sends its request at once."""

Runner = Callable[[list[str]], str]


def run(args: list[str]) -> str:
    # Job and account names are any user's bytes: what is no UTF-8 is replaced, never a crash of the poll thread.
    result = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=COMMAND_TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {result.returncode}: {result.stderr.strip()[-300:]}")
    return result.stdout


def node_states(sinfo_out: str) -> dict[str, int]:
    """`sinfo --noheader --Node --format=%N %T` lists a node once per partition: each node counts once."""
    state_by_node = {}
    for line in sinfo_out.splitlines():
        if line.strip():
            node, state = line.split()[:2]
            state_by_node[node] = STATE_OF.get(state.rstrip("*~#!%$@^-").lower(), "other")
    counts = Counter(state_by_node.values())
    return {state: counts.get(state, 0) for state in NODE_STATES}


def job_accounts(squeue_out: str) -> dict[str, str]:
    """`squeue --noheader --states=RUNNING --format=%A|%a`: job id -> account of each running job."""
    accounts = {}
    for line in squeue_out.splitlines():
        job, _, account = line.strip().partition("|")
        if job and account:
            accounts[job] = account
    return accounts


def job_starts(sacct_out: str) -> list[tuple[str, str, str, datetime, datetime]]:
    """(job id, partition, qos, submit, start) of each job sacct shows started; the rest (Unknown, None) skipped."""
    starts = []
    for line in sacct_out.splitlines():
        fields = line.split("|")
        if len(fields) < 5:
            continue
        job, submit, start, partition, qos = fields[:5]
        try:
            starts.append((job, partition, qos, datetime.strptime(submit, SACCT_TIME),
                           datetime.strptime(start, SACCT_TIME)))
        except ValueError:
            continue
    return starts


class Histogram:
    def __init__(self) -> None:
        self.buckets: dict[tuple[str, str], list[int]] = {}
        self.sums: dict[tuple[str, str], float] = {}

    def observe(self, labels: tuple[str, str], seconds: float) -> None:
        counts = self.buckets.setdefault(labels, [0] * (len(WAIT_BUCKETS) + 1))
        for i, edge in enumerate(WAIT_BUCKETS):
            if seconds <= edge:
                counts[i] += 1
        counts[-1] += 1  # +Inf
        self.sums[labels] = self.sums.get(labels, 0.0) + seconds

    def render(self, name: str) -> list[str]:
        lines = [f"# HELP {name} Seconds each job start waited since the job was submitted.",
                 f"# TYPE {name} histogram"]
        for (partition, qos), counts in sorted(self.buckets.items()):
            labels = f'partition="{_escape(partition)}",qos="{_escape(qos)}"'
            for edge, count in zip([*map(str, WAIT_BUCKETS), "+Inf"], counts, strict=True):
                lines.append(f'{name}_bucket{{{labels},le="{edge}"}} {count}')
            lines.append(f"{name}_sum{{{labels}}} {self.sums[(partition, qos)]:g}")
            lines.append(f"{name}_count{{{labels}}} {counts[-1]}")
        return lines


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Exporter:
    def __init__(self, runner: Runner = run, clock: Callable[[], datetime] = datetime.now) -> None:
        self.runner, self.clock = runner, clock
        now = clock()
        # sacct gives whole seconds: a start in the second the exporter started in may have come before it, so the
        # first second counted is the next whole one.
        self.started = now.replace(microsecond=0) + timedelta(seconds=1 if now.microsecond else 0)
        self.waits = Histogram()
        self.counted: dict[tuple[str, datetime], datetime] = {}
        """(job id, start) already observed -> start, for the starts inside the sacct window."""
        self.nodes = dict.fromkeys(NODE_STATES, 0)
        self.accounts: dict[str, str] = {}
        self.errors = 0
        self.last_success = 0.0
        self.lock = threading.Lock()

    def poll(self) -> None:
        try:
            nodes = node_states(self.runner(["sinfo", "--noheader", "--Node", "--format=%N %T"]))
            accounts = job_accounts(self.runner(["squeue", "--noheader", "--states=RUNNING", "--format=%A|%a"]))
            # Re-read a window well past the last poll, so a start the database records late is not missed;
            # `counted` keeps each start from being counted twice.
            since = max(self.started, self.clock().replace(microsecond=0) - timedelta(seconds=LOOKBACK_S))
            out = self.runner(["sacct", "--allusers", "--allocations", "--noheader", "--parsable2",
                               f"--starttime={since.strftime(SACCT_TIME)}", "--endtime=now",
                               "--format=JobIDRaw,Submit,Start,Partition,QOS"])
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
            print(f"slurm_exporter: poll failed: {error}", file=sys.stderr, flush=True)
            with self.lock:
                self.errors += 1
            return
        with self.lock:
            self.nodes, self.accounts = nodes, accounts
            # sacct also lists jobs that started before the window and still run: only starts inside it count.
            self.counted = {key: start for key, start in self.counted.items() if start >= since}
            for job, partition, qos, submit, start in job_starts(out):
                if start >= since and (job, start) not in self.counted:
                    self.counted[(job, start)] = start
                    self.waits.observe((partition, qos), max(0.0, (start - submit).total_seconds()))
            self.last_success = time.time()

    def render(self) -> str:
        with self.lock:
            lines = []
            for state in NODE_STATES:
                name = f"slurm_nodes_{state}"
                lines += [f"# HELP {name} Slurm nodes whose base state is {state}.", f"# TYPE {name} gauge",
                          f"{name} {self.nodes[state]}"]
            lines += self.waits.render("slurm_job_queue_wait_seconds")
            lines += ["# HELP slurm_job_account The Slurm account of each running job.",
                      "# TYPE slurm_job_account gauge"]
            lines += [f'slurm_job_account{{slurmjobid="{_escape(job)}",account="{_escape(account)}"}} 1'
                      for job, account in sorted(self.accounts.items())]
            lines += ["# HELP slurm_exporter_last_success_timestamp_seconds When Slurm last answered a poll.",
                      "# TYPE slurm_exporter_last_success_timestamp_seconds gauge",
                      f"slurm_exporter_last_success_timestamp_seconds {self.last_success:.3f}",
                      "# HELP slurm_exporter_errors_total Polls that failed.",
                      "# TYPE slurm_exporter_errors_total counter",
                      f"slurm_exporter_errors_total {self.errors}"]
            return "\n".join(lines) + "\n"


class BoundedHTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that holds at most `max_connections` connections and closes one silent for `timeout_s`.

    Each connection costs a descriptor and a thread; unbounded, about a thousand idle ones exhausted the lending
    controller's descriptors and killed it (issue 41). A connection is idle until its handler calls `working` (its
    whole request read); a new connection over the bound closes the oldest idle one, so idle connections, however
    many, never keep out one that sends its request at once; with every slot working, the new one is closed. Every
    read and write on a connection times out after `timeout_s` (socket timeout), and an idle connection older than
    `timeout_s` is closed at the next accept whatever it trickles. Handlers derive from BoundedHandler.
    """

    daemon_threads = True
    # Connections the kernel completes before accept: enough that a burst is accepted (and evicted) rather than
    # left retrying its handshake.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], max_connections: int,
                 timeout_s: float) -> None:
        self.max_connections, self.timeout_s = max_connections, timeout_s
        self._idle: dict[socket.socket, float] = {}
        """Connections whose request is not read yet -> when accepted (time.monotonic()), oldest first."""
        self._working: set[socket.socket] = set()
        self._lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            now = time.monotonic()
            for connection, at in list(self._idle.items()):  # oldest first
                if now - at > self.timeout_s or len(self._idle) + len(self._working) >= self.max_connections:
                    del self._idle[connection]
                    _hang_up(connection)  # its handler's read returns at once; the handler closes it
            if len(self._idle) + len(self._working) >= self.max_connections:
                request.close()  # every slot is serving a request
                return
            self._idle[request] = now
        super().process_request(request, client_address)

    def working(self, connection: socket.socket) -> None:
        """The connection's request is read: it is no longer idle, and no new connection closes it."""
        with self._lock:
            if self._idle.pop(connection, None) is not None:
                self._working.add(connection)

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._idle.pop(request, None)
            self._working.discard(request)
        super().shutdown_request(request)


def _hang_up(connection: socket.socket) -> None:
    with contextlib.suppress(OSError):  # the peer already went
        connection.shutdown(socket.SHUT_RDWR)


class BoundedHandler(BaseHTTPRequestHandler):
    """A handler for BoundedHTTPServer: reads and writes time out after the server's timeout_s."""

    server: BoundedHTTPServer

    def setup(self) -> None:
        self.request.settimeout(self.server.timeout_s)
        super().setup()

    def working(self) -> None:
        """Call once the whole request is read."""
        self.server.working(self.connection)


def metrics_server(render: Callable[[], str], listen: str, port: int,
                   max_connections: int = METRICS_MAX_CONNECTIONS,
                   timeout_s: float = LISTENER_TIMEOUT_S) -> BoundedHTTPServer:
    """An HTTP server that answers GET /metrics with render() (Prometheus text format 0.0.4) and 404 to the rest; the
    lending controller (runbooks/flex/metrics.py) serves its metrics with it too."""

    class Handler(BoundedHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server API)
            self.working()
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # scrapes are not news
            pass

    return BoundedHTTPServer((listen, port), Handler, max_connections, timeout_s)


def serve(exporter: Exporter, listen: str, port: int, interval_s: float) -> None:
    def poll_forever() -> None:
        while True:
            exporter.poll()
            time.sleep(interval_s)

    threading.Thread(target=poll_forever, daemon=True).start()
    metrics_server(exporter.render, listen, port).serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1", help="address to serve /metrics on (the one Prometheus "
                        "scrapes)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between polls of Slurm")
    args = parser.parse_args(argv)
    serve(Exporter(), args.listen, args.port, args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
