"""What each drill measures besides its alert (runbooks.acceptance.campaign.Probe): whether the fault shows, whether
service is back, and the reactions that must hold (checkpoints intact, inference errors within the objective, the
new model version serving, jobs requeued and none lost)."""

import os
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from runbooks.acceptance.campaign import Reaction
from runbooks.acceptance.load import Checkpoints, RateLoad, Tier, intact

RECENT_S = 3.0
"""s of the newest samples a probe judges: a few requests at any rate the tests and the site run."""


def reachable(url: str, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@dataclass
class NodeDaemonProbe:
    """A node's daemon (its exporter) that a failure or a partition takes away: gone while the fault holds, back
    after."""

    url: str

    def detected(self) -> bool:
        return not reachable(self.url)

    def recovered(self) -> bool:
        return reachable(self.url)

    def reactions(self) -> list[Reaction]:
        back = reachable(self.url)
        return [Reaction("node serving again", back, f"{self.url} {'answers' if back else 'does not answer'}")]


@dataclass
class StorageJitterProbe:
    """Writes to the hot tier slower than the injected delay while it holds, faster after; every checkpoint chunk the
    storage load wrote during the campaign read back with its sha256 (each verified once, runbooks.acceptance.load)."""

    load: RateLoad
    delay_s: float
    tier: Tier
    checkpoints: Checkpoints

    def _latencies(self) -> list[float]:
        return self.load.recent("latency_s", time.time() - RECENT_S)

    def detected(self) -> bool:
        return any(latency > self.delay_s for latency in self._latencies())

    def recovered(self) -> bool:
        latest = self._latencies()
        return bool(latest) and all(latency <= self.delay_s for latency in latest)

    def reactions(self) -> list[Reaction]:
        count, bad, names = intact(self.tier, self.checkpoints)
        return [Reaction("checkpoints intact", count > 0 and not bad,
                         f"{count - bad} of {count} checkpoints read back with their sha256"
                         + (f"; damaged or gone: {', '.join(names[:5])}" if bad else ""))]


@dataclass
class HotSwapProbe:
    """The new version answers every request after the swap, and the swap cost no more errors than the objective."""

    load: RateLoad
    new_version: int
    error_pct: float
    started: float = field(default_factory=time.time)

    def detected(self) -> bool:
        return self.new_version in self.load.recent("version", time.time() - RECENT_S)

    def recovered(self) -> bool:
        latest = self.load.recent("version", time.time() - RECENT_S)
        return bool(latest) and all(v == self.new_version for v in latest)

    def reactions(self) -> list[Reaction]:
        errors = self.load.recent("error", self.started)
        failed = 100 * sum(errors) / len(errors) if errors else 100.0
        return [Reaction("inference errors within objective", bool(errors) and failed <= self.error_pct,
                         f"{failed:.2f} % of {len(errors)} requests failed during the swap (objective "
                         f"{self.error_pct:g} %)")]


def jobs_on(node: str, squeue: Sequence[str] = ("squeue",), env: Mapping[str, str] | None = None) -> list[str]:
    """The jobs running on `node` now, by id."""
    done = subprocess.run([*squeue, "--noheader", "--states=R", "--format=%i", f"--nodelist={node}"],
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=15, check=False)
    return done.stdout.split()


@dataclass
class SlurmNodeProbe:
    """A node Slurm must mark down, whose training jobs must be requeued, none lost (the job ids the load submitted
    that ran there must all be pending, running or completed again)."""

    node: str
    squeue: Sequence[str]
    scontrol: Sequence[str]
    env: Mapping[str, str]
    jobs_on_node: Callable[[], list[str]]
    """Jobs that ran on the node when the fault was injected."""
    seen: list[str] = field(default_factory=list)
    down: str = ""
    """The node's state when Slurm was first seen to have marked it DOWN."""

    def _state(self) -> str:
        done = subprocess.run([*self.scontrol, "--oneliner", "show", "node", self.node], env={**os.environ, **self.env},
                              capture_output=True, text=True, timeout=15, check=False)
        return next((w.split("=", 1)[1] for w in done.stdout.split() if w.startswith("State=")), "UNKNOWN")

    def detected(self) -> bool:
        if not self.seen:
            self.seen.extend(self.jobs_on_node())
        # Slurm first marks a silent node NOT_RESPONDING, then DOWN after SlurmdTimeout, requeueing its jobs.
        state = self._state()
        if "DOWN" in state and not self.down:
            self.down = state
        return "DOWN" in state or "NOT_RESPONDING" in state

    def recovered(self) -> bool:
        return "DOWN" not in self._state()

    def reactions(self) -> list[Reaction]:
        marked = Reaction("node marked down", bool(self.down),
                          f"Slurm showed {self.node} {self.down}" if self.down else
                          f"Slurm never showed {self.node} DOWN while the fault held")
        return [marked, self._requeued()]

    def _requeued(self) -> Reaction:
        if not self.seen:
            return Reaction("training requeued", False, f"no training job ran on {self.node} when it failed")
        done = subprocess.run([*self.squeue, "--noheader", "--format=%i %T %r", "--jobs", ",".join(self.seen)],
                              env={**os.environ, **self.env}, capture_output=True, text=True, timeout=15, check=False)
        states = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines() if line.strip()}
        lost = [job for job in self.seen if states.get(job) not in ("PENDING", "RUNNING", "COMPLETED")]
        return Reaction("training requeued, none lost", not lost,
                        f"{len(self.seen) - len(lost)} of {len(self.seen)} jobs on {self.node} requeued or running"
                        + (f"; lost: {', '.join(lost)}" if lost else ""))
