"""Load generators, each bounded in rate (the spec's max_*), in time (the step's end) and in concurrency (WORKERS), and
stopped at once by an event: inference through the gateway, checkpoint writes to the hot tier and reads back, and a
Slurm job mix under the given accounts (the platform's in production) and every training QoS (gang jobs included), and
preemptible training kept running on every flex node (FlexTraining: what a lend at the shock requeues).

Each records samples the report plots: `<name>_latency_s` per request, `<name>_error` (1 or 0) per request,
`<name>_skipped` per tick it could not issue, and at each run's start `<name>_asked_per_s` (the rate the step asked:
peak x factor, whatever bounds it) and `<name>_unit_size` (what one request carries: a storage chunk's MiB), so the
verdict compares what each phase asked with what was offered; the training load also `training_job`, the id of each job
Slurm accepted, whose end, requeues and GPU-seconds the verdict asks Slurm for, and `training_job_s`, the s each job
runs.
"""

import hashlib
import json
import math
import os
import shlex
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from components.site.site import Pool, Site
from components.slurm.conf import partitions

WORKERS = 8
"""Requests one load has in flight at most: a tick that finds them all busy (for as long as WORKERS ticks take) is
skipped and counted, never queued without end."""
FREE_WORKER_MAX_S = 1.0
"""s a tick waits at most for a worker to come free before it is skipped."""
REQUEST_TIMEOUT_S = 30.0
MIB = 1 << 20
TRAINING_JOB_NAMES = "acceptance-training"
"""The job name every training job of the load carries: how the queue sampler finds them and nothing else."""


@dataclass
class RateLoad:
    """Issues `request` at factor x peak per second (capped at bound), from a pool of WORKERS threads."""

    name: str
    peak_per_s: float
    bound_per_s: float
    request: Callable[[int], tuple[bool, dict[str, float]]]
    """Request number -> (succeeded, extra samples); its latency is measured around it."""
    samples: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    timer: Callable[[], float] = time.monotonic
    """The clock a request's latency is read on: monotonic, so a step of the wall clock is no latency."""
    unit_size: float = 1.0
    """What one request carries in the load's unit: a storage chunk's MiB; 1 request, 1 job."""
    limit: int | None = None
    """Requests issued at most over the load's life (the training load's max_training_jobs): later ticks are skipped."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _count: int = 0

    def run(self, factor: float, until: float, stop: threading.Event) -> None:
        asked = self.peak_per_s * factor
        rate = min(asked, self.bound_per_s)
        began = time.time()
        # What the step asked of this load and for how long it ticked: the verdict's offered against measured.
        self._record(f"{self.name}_asked_per_s", asked, began)
        self._record(f"{self.name}_unit_size", self.unit_size, began)
        busy = threading.BoundedSemaphore(WORKERS)
        with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=self.name) as pool:
            next_at = began
            while not stop.is_set() and next_at < until:
                # A worker may take the time WORKERS ticks take to come free (a second at most, so a stop is heard):
                # a generator the host delayed catches up in a burst; requests slower than that cannot keep the rate.
                if (self.limit is None or self._count < self.limit) and busy.acquire(
                        timeout=min(WORKERS / rate, FREE_WORKER_MAX_S, max(until - time.time(), 0))):
                    self._count += 1
                    pool.submit(self._one, self._count, busy)
                else:
                    self._record(f"{self.name}_skipped", 1.0)
                next_at += 1 / rate
                stop.wait(max(next_at - time.time(), 0))
            # The window its ticks covered, each issued or skipped: a backlog the host's scheduling left when the step
            # stopped the load is no request the system under test refused.
            self._record(f"{self.name}_ran_s", min(next_at, until, time.time()) - began, began)

    def _one(self, number: int, busy: threading.BoundedSemaphore) -> None:
        started, began = time.time(), self.timer()
        try:
            ok, extra = self.request(number)
        except (OSError, ValueError, subprocess.SubprocessError):
            ok, extra = False, {}
        finally:
            busy.release()
        self._record(f"{self.name}_latency_s", self.timer() - began, started)
        self._record(f"{self.name}_error", 0.0 if ok else 1.0, started)
        for series, value in extra.items():
            self._record(f"{self.name}_{series}", value, started)

    def _record(self, series: str, value: float, at: float | None = None) -> None:
        with self._lock:
            self.samples.setdefault(series, []).append((at or time.time(), value))

    def drain(self) -> dict[str, list[tuple[float, float]]]:
        with self._lock:
            taken, self.samples = self.samples, {}
        return taken

    def recent(self, series: str, since: float) -> list[float]:
        with self._lock:
            return [v for t, v in self.samples.get(f"{self.name}_{series}", []) if t >= since]


def inference_load(gateway_url: str, key: str, model: str, peak_rps: float, max_rps: float) -> RateLoad:
    """Chat completions through the gateway with a team's key; `version` samples the served version's number when
    the answer ends with `v<n>` (the test double's answer; a real model's is ignored)."""

    def request(number: int) -> tuple[bool, dict[str, float]]:
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": f"acceptance {number}"}]})
        call = urllib.request.Request(f"{gateway_url}/v1/chat/completions", data=body.encode(), method="POST",
                                      headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(call, timeout=REQUEST_TIMEOUT_S) as response:
                answer = json.load(response)
        except urllib.error.HTTPError:
            return False, {}
        text = str(answer["choices"][0]["message"]["content"]).split()
        version = text[-1][1:] if text and text[-1].startswith("v") and text[-1][1:].isdigit() else None
        return True, {"version": float(version)} if version else {}

    return RateLoad("inference", peak_rps, max_rps, request)


BAD_NAMES_KEPT = 20
"""Names of damaged or lost chunks the storage load remembers (it counts them all): enough for a report to name some."""


@dataclass
class Checkpoints:
    """The storage load's chunks, each verified once by its sha256 when read back, and no more of them on the hot tier
    than `window` verified ones (one checkpoint dump's chunks) besides those in flight: older ones are deleted by the
    next write, so a 168 h campaign at the peak's MiB/s fills neither the tier nor this record."""

    window: int = 1
    """Verified chunks the tier keeps, the newest (what a run keeps: its newest dump)."""
    verified: int = 0
    """Chunks read back and judged, over the load's life."""
    damaged: int = 0
    """Of those, chunks whose bytes differed or could not be read back."""
    damaged_names: list[str] = field(default_factory=list)
    """The first BAD_NAMES_KEPT of them."""
    unread: dict[str, str] = field(default_factory=dict)
    """Chunks written whose read-back failed (name -> sha256): `intact` reads each once more."""
    kept: list[str] = field(default_factory=list)
    """Verified chunks still on the tier, oldest first."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window: {self.window} chunks; the tier keeps 1 at least")

    def judged(self, name: str, whole: bool) -> None:
        """Records the chunk's one verification."""
        with self.lock:
            self.unread.pop(name, None)
            self.verified += 1
            if not whole:
                self.damaged += 1
                if len(self.damaged_names) < BAD_NAMES_KEPT:
                    self.damaged_names.append(name)
            self.kept.append(name)

    def surplus(self) -> list[str]:
        """The verified chunks beyond the window, oldest first, for the caller to delete (put back if it cannot)."""
        with self.lock:
            taken, self.kept = self.kept[:-self.window], self.kept[-self.window:]
        return taken

    def not_deleted(self, names: Sequence[str]) -> None:
        with self.lock:
            self.kept[:0] = names


class Tier(Protocol):
    """Where checkpoints go: `put` deletes the chunks named in `drop` and stores the bytes under a name durably, `get`
    reads them back; each raises OSError when the tier refuses."""

    def put(self, name: str, data: bytes, drop: Sequence[str] = ()) -> None: ...
    def get(self, name: str) -> bytes: ...


@dataclass(frozen=True)
class NodeTier:
    """The hot tier as a GPU node reaches it: each checkpoint chunk written and read back by a command run on the node
    (the chunk on its stdin when written, its bytes on its stdout when read), so the storage load's IO crosses the
    node's storage link, the one the storage-jitter drill delays. Written from the gpuctl host, the jitter was never on
    the measured path (issue 36)."""

    write: Callable[[str, Sequence[str]], Sequence[str]]
    """(checkpoint name, names to delete first) -> the command, run on the node, that deletes those and stores its
    stdin under that name durably (exit 0). One command: a deletion costs the load no connection of its own."""
    read: Callable[[str], Sequence[str]]
    """Checkpoint name -> the command, run on the node, that prints what is stored under that name."""
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def shell(cls, on_node: Sequence[str], directory: Path) -> "NodeTier":
        """Through `on_node`, a command prefix that runs one shell command line on the node (`ssh ... user@node --`:
        ssh(1) hands its words to the remote shell): dd into `directory` as the node mounts the hot tier, fsynced, never
        through a link planted under the checkpoint's name, and dd out of it; rm of a planted link removes the link."""

        def path(name: str) -> str:
            return shlex.quote(str(directory / name))

        def write(name: str, drop: Sequence[str]) -> tuple[str, ...]:
            dropped = f"rm -f -- {' '.join(path(n) for n in drop)} && " if drop else ""
            return (*on_node, f"{dropped}mkdir -p -- {shlex.quote(str(directory))} && dd of={path(name)} bs=1M "
                              "iflag=fullblock oflag=nofollow conv=fsync status=none")

        return cls(write, lambda name: (*on_node, f"dd if={path(name)} bs=1M iflag=nofollow status=none"))

    def put(self, name: str, data: bytes, drop: Sequence[str] = ()) -> None:
        self._run(self.write(name, drop), data)

    def get(self, name: str) -> bytes:
        return self._run(self.read(name), b"")

    def _run(self, argv: Sequence[str], data: bytes) -> bytes:
        done = subprocess.run(list(argv), input=data, env={**os.environ, **self.env}, capture_output=True,
                              timeout=REQUEST_TIMEOUT_S, check=False)
        if done.returncode != 0:
            # OSError: the load counts the chunk failed (RateLoad), as a write the hot tier refused.
            raise OSError(f"`{' '.join(argv)}` exited {done.returncode}: "
                          f"{done.stderr[-300:].decode(errors='replace')}")
        return bytes(done.stdout)


def storage_load(tier: Tier, chunk_bytes: int, peak_mib_s: float, max_mib_s: float,
                 checkpoints: Checkpoints) -> RateLoad:
    """Checkpoint chunks written to the hot tier at the peak's MiB/s, each read back as a restart (or the NVMe
    cache's fill) reads it and verified then, once: one sample is the write and the read. The mission's "a training job
    dumping 300GB" is checkpoint_gib x time_scale of these chunks per dump; each write deletes the verified chunks
    beyond `checkpoints.window`, in the same command."""

    def request(number: int) -> tuple[bool, dict[str, float]]:
        body = os.urandom(chunk_bytes)
        name = f"ckpt-{number:06d}"
        drop = checkpoints.surplus()
        try:
            tier.put(name, body, drop)
        except OSError:
            checkpoints.not_deleted(drop)  # perhaps deleted already: the next write's rm -f does not mind
            raise
        digest = hashlib.sha256(body).hexdigest()
        try:
            back = tier.get(name)
        except OSError:
            with checkpoints.lock:
                checkpoints.unread[name] = digest  # not judged yet: intact() reads it once more
            raise
        whole = hashlib.sha256(back).hexdigest() == digest
        checkpoints.judged(name, whole)
        return whole, {}

    per_s = MIB / chunk_bytes
    return RateLoad("storage", peak_mib_s * per_s, max_mib_s * per_s, request, unit_size=chunk_bytes / MIB)


def intact(tier: Tier, checkpoints: Checkpoints) -> tuple[int, int, list[str]]:
    """(chunks verified, of them damaged or gone, the first BAD_NAMES_KEPT of those), after reading back once each chunk
    whose read-back had failed: every chunk is read back once as the load writes it, never all of them again."""
    with checkpoints.lock:
        unread = dict(checkpoints.unread)
    for name, digest in unread.items():
        try:
            whole = hashlib.sha256(tier.get(name)).hexdigest() == digest
        except OSError:
            whole = False
        checkpoints.judged(name, whole)  # deleted, when due, by the load's next write
    with checkpoints.lock:
        return checkpoints.verified, checkpoints.damaged, list(checkpoints.damaged_names)


@dataclass(frozen=True)
class TrainingJob:
    """What each job of the training load asks and does: `gpus` GPUs per node through GRES on the training partition,
    a checkpoint of `checkpoint_bytes` written (fsynced) to the hot tier as every node mounts it, then CPU burnt to
    `seconds` after its start; bounded in time (`timeout`, and --time behind it) and in size (its checkpoint removed
    at exit: the tier holds at most one per running job, or per job a node failure killed)."""

    partition: str
    gpus: int
    seconds: float
    hot_dir: Path
    checkpoint_bytes: int

    @classmethod
    def for_site(cls, site: Site, seconds: float, hot_dir: Path, checkpoint_bytes: int,
                 pool: Pool = Pool.SLURM) -> "TrainingJob":
        """On the site's first partition of the pool (the training pool's, or the flex pool's that a lend takes), as
        many GPUs as every node of it has (so any node can run it)."""
        name, groups = next((name, groups) for name, groups in partitions(site).items()
                            if all(g.pool == pool for g in groups))
        return cls(name, min(g.gpus_per_node for g in groups), seconds, hot_dir, checkpoint_bytes)

    def options(self) -> list[str]:
        # --time (minutes) a minute past the script's own bound: the backstop, never what ends a healthy job.
        return [f"--partition={self.partition}", f"--gres=gpu:{self.gpus}",
                f"--time={math.ceil(self.seconds / 60) + 1}"]

    def script(self) -> str:
        seconds = max(math.ceil(self.seconds), 1)
        mib = max(self.checkpoint_bytes // MIB, 1)
        # dd's oflag=nofollow: the checkpoint's name is never a link planted in the shared directory. The busy loop
        # runs at nice 19 so the node's daemons (and, on the test host, the other loads) keep their CPU. On a kernel
        # with autogroup, nice ranks a thread only within its session's autogroup, each session's group weighing as
        # much as any other (sched(7), "The autogroup feature"): measured here, a nice 19 loop in a session of its own
        # (slurmstepd gives each job one) took as much CPU as nice 0 loops. So the loop gets a session of its own and
        # nices its autogroup to 19 (a process may raise its own /proc/self/autogroup's); no such file, nothing to do.
        return f"""#!/bin/sh
set -eu
end=$(( $(date +%s) + {seconds} ))
dir={shlex.quote(str(self.hot_dir))}
out="$dir/training-$SLURM_JOB_ID.ckpt"
trap 'rm -f -- "$out"' EXIT
mkdir -p -- "$dir"
timeout {seconds} dd if=/dev/urandom of="$out" bs=1M count={mib} iflag=fullblock oflag=nofollow conv=fsync \
    status=none
rest=$(( end - $(date +%s) ))
if [ "$rest" -gt 0 ]; then
    timeout "$rest" setsid -w nice -n 19 sh -c '{{ echo 19 > /proc/self/autogroup; }} 2>/dev/null || :
        while :; do :; done' || [ "$?" -eq 124 ]
fi
"""


def training_load(sbatch: Sequence[str], env: Mapping[str, str], accounts: Sequence[str], qos: Sequence[str],
                  job: TrainingJob, nodes_per_gang: int, peak_per_h: float, bound_jobs: int) -> RateLoad:
    """sbatch submissions of `job` cycling through `accounts` and every training QoS; every third job a gang across
    `nodes_per_gang` nodes. Each may be requeued (--requeue). Bounded in jobs: past bound_jobs submissions the load
    submits nothing more (its ticks counted skipped)."""
    script = job.script()

    def request(number: int) -> tuple[bool, dict[str, float]]:
        gang = ["--nodes", str(nodes_per_gang)] if number % 3 == 0 else ["--nodes", "1"]
        return _submit(sbatch, env, accounts[number % len(accounts)], qos[number % len(qos)], gang, job, script)

    return RateLoad("training", peak_per_h / 3600, math.inf, request, limit=bound_jobs)


def _submit(sbatch: Sequence[str], env: Mapping[str, str], account: str, qos: str, nodes: Sequence[str],
            job: TrainingJob, script: str) -> tuple[bool, dict[str, float]]:
    """One sbatch of `job`: (accepted, the training load's samples `job` (its id) and `job_s`, when accepted)."""
    # No script file: sbatch(1) reads the script from standard input.
    done = subprocess.run([*sbatch, "--parsable", "--requeue", f"--account={account}", f"--qos={qos}", *nodes,
                           *job.options(), f"--job-name={TRAINING_JOB_NAMES}"], input=script,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=REQUEST_TIMEOUT_S,
                          check=False)
    submitted = done.stdout.strip().split(";")[0]  # --parsable: `<id>` or `<id>;<cluster>`
    ok = done.returncode == 0
    # job_s: how long each job runs, what its GPUs are asked for (the verdict's GPU-seconds requested).
    return ok, {"job": float(submitted), "job_s": job.seconds} if ok and submitted.isdigit() else {}


FLEX_IN_FLIGHT = 2
"""Jobs of the flex load on each flex node at once: one running and the next waiting for it, so the node runs training
again as soon as one ends (never idle, so a lend must take training from it)."""


@dataclass
class FlexTraining:
    """Preemptible training on the flex pool, which a lend requeues: on each flex node FLEX_IN_FLIGHT jobs of `job` (on
    the flex partition, pinned with --nodelist) pending or running at any time, under `account` and `qos`
    (slurm.flex_qos, what the flex partitions admit), so every flex node runs training when inference peaks and the
    lending controller takes one (production's flex nodes run such work until lent). Its jobs are the training load's
    (`training_job`, `training_job_s`, `training_error`): the verdict asks sacct for them with the others, and finds a
    lend's requeue there. Bounded: `limit` jobs over its life; it looks every `every_s` which of its jobs Slurm still
    has (squeue)."""

    sbatch: Sequence[str]
    squeue: Sequence[str]
    env: Mapping[str, str]
    account: str
    qos: str
    job: TrainingJob
    nodes: Sequence[str]
    limit: int
    every_s: float = 1.0
    name: str = "flex_training"
    placed: dict[str, list[str]] = field(default_factory=dict)
    """Node -> the ids of the jobs submitted to it."""
    samples: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, factor: float, until: float, stop: threading.Event) -> None:
        script = self.job.script()
        while not stop.is_set() and time.time() < until:
            live = self._live()
            for node in self.nodes:
                if live is not None:  # squeue failed: the next look tries again
                    self._keep(node, live, script, stop)
            stop.wait(self.every_s)

    def _keep(self, node: str, live: set[str], script: str, stop: threading.Event) -> None:
        """Submits to `node` until FLEX_IN_FLIGHT of its jobs are live (or the limit, a stop or a refusal)."""
        while (sum(job in live for job in self.placed.get(node, [])) < FLEX_IN_FLIGHT and not stop.is_set()
               and sum(map(len, self.placed.values())) < self.limit):
            at = time.time()
            try:
                ok, extra = _submit(self.sbatch, self.env, self.account, self.qos,
                                    ["--nodes", "1", f"--nodelist={node}"], self.job, script)
            except (OSError, subprocess.SubprocessError):
                ok, extra = False, {}
            with self._lock:
                self.samples.setdefault("training_error", []).append((at, 0.0 if ok else 1.0))
                for series, value in extra.items():
                    self.samples.setdefault(f"training_{series}", []).append((at, value))
            if not ok or "job" not in extra:
                return  # refused: the verdict's `training jobs refused` says so; the next look tries again
            job = str(int(extra["job"]))
            self.placed.setdefault(node, []).append(job)
            live.add(job)

    def _live(self) -> set[str] | None:
        """The ids of the training load's jobs Slurm has pending, running or completing; None when squeue fails."""
        try:
            done = subprocess.run([*self.squeue, "--noheader", "--name=" + TRAINING_JOB_NAMES, "--format=%i"],
                                  env={**os.environ, **self.env}, capture_output=True, text=True,
                                  timeout=REQUEST_TIMEOUT_S, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        return set(done.stdout.split())

    def drain(self) -> dict[str, list[tuple[float, float]]]:
        with self._lock:
            taken, self.samples = self.samples, {}
        return taken


LOST_STATES = ("BOOT_FAIL", "CANCELLED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT")
"""sacct states of a job that ended without completing and was not requeued (sacct(1), JOB STATE CODES): its work is
lost. PENDING, RUNNING, REQUEUED and COMPLETED are not."""


@dataclass(frozen=True)
class JobRecord:
    """One job as Slurm accounted it, over every run of it (a requeued job runs again under the same id)."""

    state: str
    """Its last run's, one word: `CANCELLED by 0` reads CANCELLED."""
    gpu_s: float
    """GPUs allocated (AllocTRES gres/gpu) x seconds elapsed, summed over its runs: 0 for a job that ran without a GPU,
    whatever it asked."""
    requested_gpus: int = 0
    """GPUs it asked (ReqTRES gres/gpu, every node's together)."""
    requeues: tuple[tuple[float, str, str], ...] = ()
    """Each run that ended in a requeue (preempted, its node failed, requeued by hand, stopped by a lend): when it ended
    (time.time()), the state sacct gave it and the nodes it ran on (sacct's NodeList)."""


def job_states(sacct: Sequence[str], env: Mapping[str, str]) -> Callable[[Sequence[str]], dict[str, JobRecord]]:
    """Job id -> its record now, from sacct's allocation records of every run (--duplicates: a requeued job's earlier
    runs are records of their own, in the order they ran); a job sacct does not know yet is absent."""

    def states(jobs: Sequence[str]) -> dict[str, JobRecord]:
        if not jobs:
            return {}
        done = subprocess.run([*sacct, "-X", "-D", "-n", "-P",
                               "--format=JobID,State,AllocTRES,ElapsedRaw,End,ReqTRES,NodeList", "-j", ",".join(jobs)],
                              env={**os.environ, **env}, capture_output=True, text=True, timeout=REQUEST_TIMEOUT_S,
                              check=True)
        runs: dict[str, list[list[str]]] = {}
        for line in done.stdout.splitlines():
            fields = (line.split("|") + [""] * 6)[:7]
            if fields[0].strip() in jobs and fields[1].split():
                runs.setdefault(fields[0].strip(), []).append(fields)
        return {job: JobRecord(
            ran[-1][1].split()[0], sum(allocated_gpus(tres) * float(elapsed or 0) for _, _, tres, elapsed, *_ in ran),
            allocated_gpus(ran[-1][5]),
            tuple((_ended(end), state.split()[0], nodes) for _, state, _, _, end, _, nodes in ran[:-1]))
            for job, ran in runs.items()}

    return states


def _ended(end: str) -> float:
    """sacct's End (`2026-12-03T18:59:01`, the local time of the Slurm controller, as this host reads it) as
    time.time(); a run that has not ended (`Unknown`) at 0."""
    try:
        return datetime.fromisoformat(end).timestamp()
    except ValueError:
        return 0.0


def allocated_gpus(tres: str) -> int:
    """The GPUs in sacct's AllocTRES or ReqTRES (`cpu=2,gres/gpu:a800=8,gres/gpu=8,node=1`): the untyped gres/gpu
    count, which slurmdbd records with AccountingStorageTRES=gres/gpu (components/slurm/conf.py); 0 where none."""
    counts = {key: value for key, _, value in (item.partition("=") for item in tres.split(","))}
    return int(counts.get("gres/gpu") or 0)


@dataclass
class PrometheusSampler:
    """Not a load: samples a PromQL instant query every `every_s` while the loads run (GPU utilization, the training
    queue's p95 wait), for the report."""

    name: str
    prometheus_url: str
    query: str
    every_s: float = 1.0
    samples: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def run(self, factor: float, until: float, stop: threading.Event) -> None:
        while not stop.is_set() and time.time() < until:
            url = f"{self.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': self.query})}"
            try:
                with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as response:
                    result = json.load(response)["data"]["result"]
                if result:
                    self.samples.setdefault(self.name, []).append((time.time(), float(result[0]["value"][1])))
            except (OSError, ValueError, KeyError):
                pass  # a missing point shows as a gap in the plot
            stop.wait(self.every_s)

    def drain(self) -> dict[str, list[tuple[float, float]]]:
        taken, self.samples = self.samples, {}
        return taken


@dataclass
class QueueWaitSampler:
    """Not a load: each job the training load started, once, with how long it waited from submission to start
    (squeue's %V and %S), for the report's training queue panel."""

    squeue: Sequence[str]
    env: Mapping[str, str]
    every_s: float = 1.0
    seen: set[str] = field(default_factory=set)
    samples: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    name: str = "training_queue_wait_s"

    def run(self, factor: float, until: float, stop: threading.Event) -> None:
        while not stop.is_set() and time.time() < until:
            done = subprocess.run([*self.squeue, "--noheader", "--states=R", "--name=" + TRAINING_JOB_NAMES,
                                   "--format=%i %V %S"], env={**os.environ, **self.env}, capture_output=True,
                                  text=True, timeout=REQUEST_TIMEOUT_S, check=False)
            for line in done.stdout.splitlines():
                job, submitted, started = (line.split() + ["", "", ""])[:3]
                if job in self.seen or "T" not in submitted or "T" not in started:
                    continue
                self.seen.add(job)
                wait = (datetime.fromisoformat(started) - datetime.fromisoformat(submitted)).total_seconds()
                self.samples.setdefault(self.name, []).append((time.time(), wait))
            stop.wait(self.every_s)

    def drain(self) -> dict[str, list[tuple[float, float]]]:
        taken, self.samples = self.samples, {}
        return taken
