"""Lending the flex pool to Kubernetes inference at a peak, and taking it back.

Flex nodes run Slurm work until lent (docs/scheduling.md, "Lending the flex pool"). Lending a node:

1. Slurm stops starting jobs on it: `scontrol update State=DRAIN Reason=<LEND_REASON>`. A node with any other
   reason (a failed node check, an operator) or down, failed or in maintenance is not lent.
2. Running jobs whose QoS the inference class preempts in the one preemption table are requeued; any other job
   (one Slurm cannot requeue, or of another QoS: the flex partitions admit only slurm.flex_qos, those the inference
   class preempts, so only a job that started before a change to either) is left to finish, and the node stays
   draining until it does.
3. As soon as Slurm has the node idle, it gets the label LENT_LABEL=true, whatever the other nodes of the lend are
   still waiting for. The flex taint stays: only pods that tolerate it land on flex nodes, and the inference
   manifests in docs/scheduling.md also require the label, so they use lent nodes only. Kueue's flex flavor
   selects the label too.

A job is stopped by the lend itself, then requeued: SIGTERM to the job and its children, STOP_GRACE_S to end, then
SIGKILL to whatever still runs, and `scontrol requeue` once Slurm has it completing or ended (scontrol(1): "Requeue a
running, suspended or finished Slurm batch job"). Requeueing a running job instead makes slurmd wait MAX(KillWait, 5) s
between its SIGTERM and SIGKILL (components/scheduling/preemption.py KILL_WAIT_S): a trainer that ignores SIGTERM
held the node 5.4 s that way, this way 2.7-3.4 s. Before the first signal each job is marked in its AdminComment with
its restart count, ahead of the comment an administrator had put there (restored once Slurm has requeued the job); a
lend run again requeues a marked job that ended unrequeued (its restart count unchanged), so a crash between the stop
and the requeue loses no job while Slurm still keeps the ended one (MinJobAge, 300 s by default). Both the mark and
whether a job can be requeued are read from `squeue --json`, whose fields are typed: `scontrol show job` prints names
and paths the job's owner chose, which may read as `AdminComment=...` or `Requeue=1`. A requeue Slurm refuses leaves
that node's outcome not done, lent or not, so the lend is run again in time.

Every field read from Slurm is untrusted (any user names jobs, and Slurm prints the bytes as given):
runbooks/flex/slurm_read.py decodes and checks each, and a job whose fields fail is left alone like protected work.

While nodes are lent, the controller also sets each lent model's replica floor (`set_replica_floor`: KEDA's
minReplicaCount on the ScaledObject vllm-stack names `<release>-<model>-scaledobject`), so a lent node carries every
replica it fits (components/scheduling/lending_decision.py, replica_floors); a later `pulumi up` puts the chart's
value back, and the next step sets it again.

Taking a node back undoes this in the order that never gives one GPU to both schedulers: the label goes, the
node's pods are evicted (`kubectl drain`, which honours PodDisruptionBudgets), the node is uncordoned, and only
then does Slurm resume it. Both directions read the live state first, so running them again finishes what a
timeout or a crash left half done.
"""

import json
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from components.inference.values import NAMESPACE as INFERENCE_NAMESPACE
from components.inference.values import scaled_object
from components.scheduling.lending_decision import FlexNode, Job, Owner
from components.scheduling.preemption import inference_preempts
from components.site.site import Pool, Site
from components.site.wellknown import FLEX_LENT_LABEL as LENT_LABEL
from runbooks.flex import slurm_read
from runbooks.flex.slurm_read import JOB_LINE_FORMAT, UNREADABLE_STATE, JobRecord, Unreadable

LEND_REASON = "gpuctl flex: lent to kubernetes inference"
COMMAND_TIMEOUT_S = 30
RUNNING = "R,CF,CG,S,ST,SI,SO,RS"
"""squeue states of jobs that hold a node's GPUs (all but pending and ended)."""
LIVE = "R,CF,S,ST,SI,SO,RS"
"""RUNNING but completing (CG): the jobs whose processes may still run."""
UNHEALTHY = ("DOWN", "FAIL", "MAINT", "REBOOT", "POWER", UNREADABLE_STATE)
"""Prefixes of Slurm node state flags that make a node unfit to lend or to resume (NOT_RESPONDING is transient); a
State that does not read as Slurm's is unfit too."""
STOP_GRACE_S = 2.0
"""s a lend gives a job between its SIGTERM and its SIGKILL: enough to flush logs and close files, as a requeue
loses the work since the last periodic checkpoint whatever the wait (no sharded checkpoint is written in seconds,
KILL_WAIT_S says more), and short enough that the node is lent within 5 s of the decision (issue 22)."""
REQUEUE_MARK = "gpuctl-flex-requeue-at-restart-"
"""AdminComment of a job the lend stops and then requeues, followed by its restart count (only a Slurm administrator
sets AdminComment, so a job's owner cannot forge it)."""
MARK_KEEPS = "; over: "
"""Between a lend's mark and the AdminComment the job had before, which the lend restores after the requeue."""
STOPPED = "CG,CD,F,CA,TO,NF,OOM,PR,BF,DL"
"""squeue states of jobs completing or ended (Slurm keeps an ended one MinJobAge seconds)."""
POLL_S = 0.5
"""s between looks at the nodes a lend waits for: a node is labelled at most this long after Slurm has it idle
(each look is one squeue and one scontrol per waiting node)."""


class Runner(Protocol):
    def __call__(self, args: Sequence[str], timeout_s: float = COMMAND_TIMEOUT_S) -> str:
        """Runs a command and returns its standard output, or raises CommandError."""


class CommandError(Exception):
    """A command failed, timed out or is not installed."""


class FlexError(Exception):
    """The request does not apply: not a flex node, or nothing to do it with."""


@dataclass(frozen=True)
class NodeOutcome:
    node: str
    done: bool
    """Whether the node reached the state asked for (lent, or back in Slurm)."""
    detail: str


def run_command(args: Sequence[str], timeout_s: float = COMMAND_TIMEOUT_S) -> str:
    """Runs a command; its output decoded as UTF-8 whatever bytes a job's owner put in it (slurm_read.decode)."""
    try:
        completed = subprocess.run(list(args), capture_output=True, timeout=timeout_s)
    except FileNotFoundError:
        raise CommandError(f"{args[0]} is not installed or not on PATH") from None
    except subprocess.TimeoutExpired:
        raise CommandError(f"{' '.join(args)} did not answer within {timeout_s:g} s") from None
    stdout = slurm_read.decode(completed.stdout)
    if completed.returncode != 0:
        said = (slurm_read.decode(completed.stderr) or stdout).strip().splitlines()
        # Slurm's errors quote job fields: repr keeps their control characters out of the terminal and the journal.
        last = repr(said[-1])[1:-1] if said else "no output"
        raise CommandError(f"{' '.join(args)} exited {completed.returncode}: {last}")
    return stdout


def unhealthy(state: str) -> bool:
    return any(flag.startswith(UNHEALTHY) for flag in slurm_read.node_state(state).split("+"))


def kept_comment(comment: str) -> str:
    """The AdminComment a job had before a lend marked it (its own, when it carries no mark)."""
    return comment.partition(MARK_KEEPS)[2] if comment.startswith(REQUEUE_MARK) else comment


def lend_mark(record: JobRecord) -> str:
    """The AdminComment a lend gives a job it will stop: the mark with the job's restart count, then what it had."""
    kept = kept_comment(record.admin_comment)
    return f"{REQUEUE_MARK}{record.restarts}{MARK_KEEPS + kept if kept else ''}"


def stopped_by_lend(record: JobRecord) -> bool:
    """Whether a lend stopped the job and Slurm has not requeued it since: marked at its current restart count."""
    return record.admin_comment.partition(MARK_KEEPS)[0] == f"{REQUEUE_MARK}{record.restarts}"


def _with_unrequeued(outcome: NodeOutcome, unrequeued: Sequence[tuple[str, str]]) -> NodeOutcome:
    """A lend is not done while a job it stopped waits to be requeued, even on a node it lent: run again, the lend
    requeues it, but only while Slurm still keeps the ended job (MinJobAge)."""
    jobs = [job for node, job in unrequeued if node == outcome.node]
    if not jobs:
        return outcome
    return NodeOutcome(outcome.node, False, f"{outcome.detail}; job {', '.join(jobs)} stopped but not requeued: run "
                                            "lend again within Slurm's MinJobAge to requeue it")


def flex_nodes(site: Site) -> list[str]:
    return [node.name for group in site.node_groups if group.pool == Pool.FLEX for node in group.nodes]


def chosen(site: Site, nodes: Sequence[str]) -> list[str]:
    """The nodes asked for (all flex nodes when none), refusing any that is not in the flex pool."""
    flex = flex_nodes(site)
    if not flex:
        raise FlexError("the site has no flex pool nodes (node_groups[].pool: flex)")
    strangers = [n for n in nodes if n not in flex]
    if strangers:
        raise FlexError(f"--node {', '.join(strangers)}: not in the flex pool (flex nodes: {', '.join(flex)})")
    return list(dict.fromkeys(nodes)) or flex


@dataclass
class Flex:
    site: Site
    slurm: Runner
    kubectl: Runner
    progress: Callable[[str], None]
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def node_fields(self, node: str) -> dict[str, str]:
        out = self.slurm(["scontrol", "--oneliner", "show", "node", node])
        fields: dict[str, str] = {}
        for pair in out.split():
            key, _, value = pair.partition("=")
            fields.setdefault(key, value)
        # Reason may hold spaces; it is the last field and runs to the end of the line.
        if "Reason=" in out:
            fields["Reason"] = out.split("Reason=", 1)[1].rsplit(" [", 1)[0].strip()
        fields["State"] = slurm_read.node_state(fields.get("State", ""))
        return fields

    def jobs(self, node: str, states: str = RUNNING) -> list[slurm_read.JobLine]:
        """The jobs holding the node's GPUs (of those in `states`)."""
        return slurm_read.job_lines(self.slurm(["squeue", "--noheader", f"--nodelist={node}", f"--states={states}",
                                                JOB_LINE_FORMAT]))

    def lend(self, nodes: Sequence[str], wait_s: float, poll_s: float = POLL_S) -> list[NodeOutcome]:
        targets, refused = [], []
        for node in chosen(self.site, nodes):
            fields = self.node_fields(node)
            state, reason = fields.get("State", ""), fields.get("Reason", "")
            if reason not in ("", LEND_REASON) or unhealthy(state):
                why = f" for {reason!r}" if reason else ""
                refused.append(NodeOutcome(node, False, f"not lent: Slurm has it {state}{why}"))
                continue
            self.slurm(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={LEND_REASON}"])
            targets.append(node)
        unrequeued = self.requeue_stopped(targets)
        preemptible, kept, stopping = inference_preempts(self.site), {}, {}
        live = {node: self.jobs(node, LIVE) for node in targets}  # a completing job is only waited for
        records = self.job_records() if any(j.qos in preemptible for jobs in live.values() for j in jobs) else {}
        for node, jobs in live.items():
            for job, qos in ((j.id, j.qos) for j in jobs):
                if qos not in preemptible:
                    kept[job] = "not preempted by inference"
                    continue
                record = records.get(job)
                if record is None:
                    kept[job] = "no record in squeue --json"  # or ended and gone since squeue listed it
                    continue
                if isinstance(record, Unreadable):
                    kept[job] = f"its Slurm record does not read: {record.why}"
                    self.progress(f"{node}: job {job} ({qos}) stays: its Slurm record does not read ({record.why})")
                    continue
                if record.heterogeneous:
                    kept[job] = "a heterogeneous job's component"
                    self.progress(f"{node}: job {job} ({qos}) stays: a lend does not requeue part of a heterogeneous "
                                  "job")
                    continue
                if not record.requeueable:
                    # Interactive jobs and --no-requeue ones cannot be requeued; cancelling is the owner's call.
                    kept[job] = "could not be requeued"
                    self.progress(f"{node}: job {job} ({qos}) stays: Slurm cannot requeue it (an interactive or "
                                  "--no-requeue job)")
                    continue
                self.slurm(["scontrol", "update", f"JobId={job}", f"AdminComment={lend_mark(record)}"])
                self._signal(job, "TERM", [node])
                stopping[job] = (node, qos, kept_comment(record.admin_comment))
        unrequeued += self._stop_and_requeue(stopping, poll_s)
        outcomes = self._wait_idle(targets, wait_s, poll_s, kept, self._label)
        return refused + [_with_unrequeued(outcome, unrequeued) for outcome in outcomes]

    def job_records(self) -> dict[str, JobRecord | Unreadable]:
        """Slurm's record of each job it keeps (ended ones too, for MinJobAge), by id, from `squeue --json`: typed
        fields (`admin_comment`, `restart_cnt`, `requeue`, `batch_flag`, `het_job_id`; Slurm 22.05's openapi
        v0.0.38), where `scontrol show job` prints them amid text the job's owner writes. Slurm 22.05's squeue ignores
        its filters with --json, so one call serves a whole lend."""
        try:
            return slurm_read.job_records(self.slurm(["squeue", "--json"]))
        except slurm_read.UnreadableOutputError as error:
            raise CommandError(f"squeue --json gave no job list ({error}): the lend reads the fields of Slurm 22.05 "
                               "(openapi v0.0.38)") from None

    def _live(self, jobs: Sequence[str], nodes: Sequence[str]) -> set[str]:
        """Those of `jobs` whose processes may still run on `nodes` (not yet completing, nor ended)."""
        if not jobs:
            return set()
        out = self.slurm(["squeue", "--noheader", f"--nodelist={','.join(nodes)}", f"--states={LIVE}",
                          "--format=%A"])
        return slurm_read.job_ids(out) & set(jobs)

    def _live_after(self, jobs: Sequence[str], nodes: Sequence[str], wait_s: float, poll_s: float) -> set[str]:
        """Those of `jobs` still live once they all have stopped, or after wait_s."""
        deadline = self.clock() + wait_s
        live = self._live(jobs, nodes)
        while live and self.clock() < deadline:
            self.sleep(min(poll_s, 0.1))
            live = self._live(sorted(live), nodes)
        return live

    def _signal(self, job: str, signal: str, nodes: Sequence[str], *flags: str) -> None:
        try:
            self.slurm(["scancel", f"--signal={signal}", *flags, "--full", job])
        except CommandError:
            if job in self._live([job], nodes):
                raise  # not the race with the job's own end

    def _stop_and_requeue(self, stopping: dict[str, tuple[str, str, str]], poll_s: float) -> list[tuple[str, str]]:
        """SIGKILL to the jobs that outlive STOP_GRACE_S after their SIGTERM, then requeue each once its processes
        are gone: a live job's requeue would wait MAX(KillWait, 5) s in slurmd before its SIGKILL. A completing or
        ended job is requeued as it is (scontrol(1) requeues "a running, suspended or finished" batch job). Returns
        the (node, job) of each stopped job Slurm did not requeue."""
        nodes = sorted({node for node, _, _ in stopping.values()})
        live = self._live_after(list(stopping), nodes, STOP_GRACE_S, poll_s)
        for job in sorted(live):
            # --batch with --full: the batch step and its children (srun steps among them) at once; without
            # --batch, scancel's SIGKILL is a cancel, which waits KillWait like a requeue.
            self._signal(job, "KILL", nodes, "--batch")
        live = self._live_after(sorted(live), nodes, COMMAND_TIMEOUT_S, poll_s)
        unrequeued = []
        for job, (node, qos, comment) in stopping.items():
            if job in live:
                self.progress(f"{node}: job {job} ({qos}) still runs {COMMAND_TIMEOUT_S} s after its SIGKILL; run "
                              "lend again to requeue it")
                continue  # the node stays draining while it runs
            if not self._requeue(node, job, comment, f"({qos}), which inference preempts"):
                unrequeued.append((node, job))
        return unrequeued

    def _requeue(self, node: str, job: str, comment: str, why: str) -> bool:
        """Requeues a job a lend stopped, then gives it back `comment`, the AdminComment it had before the mark."""
        try:
            self.slurm(["scontrol", "requeue", job])
        except CommandError as error:
            self.progress(f"{node}: job {job} was stopped but not requeued: {error}; run lend again within Slurm's "
                          "MinJobAge to requeue it")
            return False
        self.progress(f"{node}: requeued job {job} {why}")
        try:
            # Done with: no later lend may take the mark for a stop it still has to finish.
            self.slurm(["scontrol", "update", f"JobId={job}", f"AdminComment={comment}"])
        except CommandError as error:
            self.progress(f"{node}: job {job}'s lend mark stays ({error}); its restart count keeps it from use")
        return True

    def requeue_stopped(self, nodes: Sequence[str]) -> list[tuple[str, str]]:
        """Requeues the jobs an earlier lend stopped but did not requeue (it crashed or timed out in between, or
        Slurm refused); returns the (node, job) of each Slurm did not requeue this time either."""
        unrequeued, records = [], None
        preemptible = inference_preempts(self.site)
        for node in nodes:
            # Only what a lend may requeue, whatever the mark says: one an administrator wrote by hand on a job of a
            # QoS inference does not preempt is no lend's.
            for job in (j.id for j in self.jobs(node, STOPPED) if j.readable and j.qos in preemptible):
                records = self.job_records() if records is None else records
                record = records.get(job)
                if (isinstance(record, JobRecord) and record.requeueable and not record.heterogeneous
                        and stopped_by_lend(record)
                        and not self._requeue(node, job, kept_comment(record.admin_comment),
                                              "(stopped by an earlier lend)")):
                    unrequeued.append((node, job))
        return unrequeued

    def _label(self, node: str) -> None:
        self.kubectl(["kubectl", "label", "node", node, f"{LENT_LABEL}=true", "--overwrite"])
        # A reclaim that stopped at `kubectl drain` left the node cordoned.
        self.kubectl(["kubectl", "uncordon", node])
        self.progress(f"{node}: lent to kubernetes inference")

    def _wait_idle(self, nodes: list[str], wait_s: float, poll_s: float, kept: dict[str, str],
                   free: Callable[[str], None]) -> list[NodeOutcome]:
        """Waits until each node runs no job and Slurm has it IDLE (epilogs done), at most wait_s, calling `free`
        with each node as soon as it is: inference gets a node the moment Slurm lets it go, not when the last one
        does (a job that cannot be requeued may hold another for the whole wait)."""
        deadline = self.clock() + wait_s
        pending = set(nodes)
        held: dict[str, tuple[list[slurm_read.JobLine], str]] = {}
        while True:
            for node in sorted(pending):
                jobs, state = self.jobs(node), self.node_fields(node).get("State", "")
                held[node] = (jobs, state)
                if not jobs and state.split("+")[0] == "IDLE" and "COMPLETING" not in state:
                    pending.discard(node)
                    free(node)
            if not pending or self.clock() >= deadline:
                break
            self.sleep(poll_s)
        outcomes = []
        for node in nodes:
            jobs, state = held[node]
            if node not in pending:
                outcomes.append(NodeOutcome(node, True, "lent"))
            elif jobs:
                running = ", ".join(f"{j.id} ({j.qos}{', ' + kept[j.id] if j.id in kept else ''})" for j in jobs)
                outcomes.append(NodeOutcome(node, False, f"draining: still runs {running}; run lend again to finish"))
            else:
                outcomes.append(NodeOutcome(node, False, f"draining: Slurm has it {state}; run lend again to finish"))
        return outcomes

    def reclaim(self, nodes: Sequence[str], wait_s: float) -> list[NodeOutcome]:
        outcomes = []
        for node in chosen(self.site, nodes):
            self.kubectl(["kubectl", "label", "node", node, f"{LENT_LABEL}-"])
            try:
                self.kubectl(["kubectl", "drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
                              f"--timeout={max(1, round(wait_s))}s"], wait_s + COMMAND_TIMEOUT_S)
            except CommandError as error:
                # Pods may still hold GPUs: Slurm must not get the node back yet.
                outcomes.append(NodeOutcome(node, False, f"pods not evicted, Slurm not resumed: {error}"))
                continue
            self.kubectl(["kubectl", "uncordon", node])
            fields = self.node_fields(node)
            state, reason = fields.get("State", ""), fields.get("Reason", "")
            if reason == LEND_REASON:
                self.slurm(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
                outcomes.append(NodeOutcome(node, True, "back in Slurm"))
            elif reason:
                outcomes.append(NodeOutcome(node, False, f"left drained: Slurm drained it for {reason!r}, not for "
                                                         "lending"))
            elif unhealthy(state):
                outcomes.append(NodeOutcome(node, False, f"Slurm has it {state}: see "
                                                         "docs/sop/slurm-nodes-unavailable.md"))
            else:
                outcomes.append(NodeOutcome(node, True, "back in Slurm (it was not lent)"))
            self.progress(f"{node}: {outcomes[-1].detail}")
        return outcomes

    def pool(self) -> tuple[FlexNode, ...]:
        """The flex pool as the lending decision reads it: who has each node, whether it may be lent or resumed, and
        its jobs with what a requeue would lose."""
        lent = self._lent()
        preemptible = inference_preempts(self.site)
        # A job that ran longer than the site's checkpoint interval has saved one since: a requeue loses less.
        interval_s = self.site.storage.nfs_hot.checkpoint_interval_s
        nodes = []
        gpus = {n.name: g.gpu_model for g in self.site.node_groups if g.pool == Pool.FLEX for n in g.nodes}
        for node in flex_nodes(self.site):
            fields = self.node_fields(node)
            reason = fields.get("Reason", "")
            owner = Owner.LENT if node in lent else Owner.LENDING if reason == LEND_REASON else Owner.SLURM
            jobs = tuple(Job(j.id, j.qos, j.readable and j.qos in preemptible, min(j.used_s, interval_s))
                         for j in self.jobs(node))
            usable = reason in ("", LEND_REASON) and not unhealthy(fields.get("State", ""))
            nodes.append(FlexNode(node, owner, usable, jobs, gpu_model=gpus[node]))
        return tuple(nodes)

    def set_replica_floor(self, model: str, replicas: int) -> None:
        """The least replicas the model's autoscaler keeps: its ScaledObject's minReplicaCount (the chart's
        templates/scaledobject-vllm.yaml names it after the release and the model)."""
        self.kubectl(["kubectl", "patch", "scaledobject", scaled_object(model),
                      "--namespace", INFERENCE_NAMESPACE, "--type", "merge",
                      "--patch", json.dumps({"spec": {"minReplicaCount": replicas}})])

    def _lent(self) -> set[str]:
        out = self.kubectl(["kubectl", "get", "nodes", "--selector", f"{LENT_LABEL}=true", "--output", "name"])
        return {name.removeprefix("node/") for name in out.split()}

    def status(self) -> list[NodeOutcome]:
        lent = self._lent()
        outcomes = []
        for node in flex_nodes(self.site):
            fields = self.node_fields(node)
            jobs = self.jobs(node)
            where = "kubernetes" if node in lent else "slurm"
            outcomes.append(NodeOutcome(node, where == "kubernetes", f"{where}; Slurm {fields.get('State', '?')}"
                                        f"{', ' + str(len(jobs)) + ' jobs' if jobs else ''}"))
        return outcomes
