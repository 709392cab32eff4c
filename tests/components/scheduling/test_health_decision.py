"""The health decision: a node's way from suspect through drain and diagnosis to return or a human, table-driven; and
over generated worlds, that it never drains past its budget, never acts on a node someone else holds and pauses on
missing inputs."""

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.scheduling.health_decision import (
    HANDED_REASON,
    SUSPECT_REASON,
    Action,
    Diagnosis,
    DiagStatus,
    KubeView,
    NodeMemory,
    NodeView,
    Phase,
    Reason,
    SlurmView,
    World,
    decide,
    drain_budget,
    phase,
)
from components.site.health import Health
from components.site.maintenance_window import within

HEALTH = Health(max_drained_pct=25, failures_before_handoff=2)
"""4 nodes: one may be drained."""
TIMEOUT_S = 3600.0
T = 1_000_000.0
XID79 = ("GPU 3: XID 79 (GPU has fallen off the bus)",)
LEND = "gpuctl flex: lent to kubernetes inference"


def node(name: str = "gpu-a800-01", findings: tuple[str, ...] | None = (), state: str = "IDLE", reason: str = "",
         kube: KubeView | None = None, diagnosis: Diagnosis | None = None) -> NodeView:
    return NodeView(name, findings, SlurmView(state, reason), kube if kube is not None else KubeView(), diagnosis)


def ours(name: str = "gpu-a800-01", **changes: object) -> NodeView:
    """A node the controller drained and cordoned."""
    base = node(name, reason=f"{SUSPECT_REASON}: XID 79", state="IDLE+DRAIN",
                kube=KubeView(cordoned=True, mark=Phase.SUSPECT))
    return replace(base, **changes)  # type: ignore[arg-type]


def world(*views: NodeView, memory: dict[str, NodeMemory] | None = None, at: float = T) -> World:
    others = [node(f"gpu-a800-{i:02d}") for i in range(90, 94 - len(views))]
    return World(at, (*views, *others), (), memory or {})


def only(decision_world: World, health: Health = HEALTH) -> tuple[Action, Reason, str]:
    decision = decide(decision_world, health, TIMEOUT_S)
    made = next(d for d in decision.nodes if d.node == decision_world.nodes[0].name)  # type: ignore[index]
    return made.action, made.reason, made.detail


SINCE = {"gpu-a800-01": NodeMemory(suspect_since=T - 100)}


@pytest.mark.parametrize(("view", "memory", "expected"), [
    pytest.param(node(), {}, (Action.WAIT, Reason.HEALTHY), id="should leave a node without findings alone"),
    pytest.param(node(findings=XID79), {}, (Action.DRAIN, Reason.SUSPECT), id="should drain a node with a finding"),
    pytest.param(node(findings=None), {}, (Action.WAIT, Reason.STALE), id="should not judge a node on stale samples"),
    pytest.param(node(findings=XID79, reason=LEND), {}, (Action.WAIT, Reason.HELD),
                 id="should not drain a node the lending controller drained"),
    pytest.param(node(findings=XID79, kube=KubeView(lent=True)), {}, (Action.WAIT, Reason.HELD),
                 id="should not drain a node lent to inference"),
    pytest.param(node(findings=XID79, kube=KubeView(held_by="drill node_failure")), {}, (Action.WAIT, Reason.HELD),
                 id="should not drain a node a drill holds"),
    pytest.param(node(findings=XID79, state="DOWN+NOT_RESPONDING"), {}, (Action.WAIT, Reason.HELD),
                 id="should leave a node Slurm has down to Slurm"),
    pytest.param(node(findings=XID79, kube=KubeView(cordoned=True)), {}, (Action.WAIT, Reason.HELD),
                 id="should not drain a node someone else cordoned"),
    pytest.param(ours(kube=KubeView()), SINCE, (Action.DRAIN, Reason.SUSPECT),
                 id="should finish a drain that stopped before the cordon"),
    pytest.param(ours(slurm=SlurmView("MIXED+DRAIN", f"{SUSPECT_REASON}: x")), SINCE, (Action.WAIT, Reason.DRAINING),
                 id="should wait for running jobs to finish"),
    pytest.param(ours(kube=KubeView(cordoned=True, mark=Phase.SUSPECT, gpu_pods=2)), SINCE,
                 (Action.WAIT, Reason.DRAINING), id="should wait for GPU pods to finish"),
    pytest.param(ours(), SINCE, (Action.DIAGNOSE, Reason.IDLE), id="should diagnose an idle suspect node"),
    pytest.param(ours(diagnosis=Diagnosis(DiagStatus.RUNNING, T - 60)), SINCE, (Action.WAIT, Reason.DIAGNOSING),
                 id="should wait for a running diagnosis"),
    pytest.param(ours(diagnosis=Diagnosis(DiagStatus.RUNNING, T - TIMEOUT_S - 1)),
                 {"gpu-a800-01": NodeMemory(suspect_since=T - 2 * TIMEOUT_S)},
                 (Action.DIAGNOSE, Reason.DIAG_TIMEOUT), id="should count a diagnosis past its time as a failure"),
    pytest.param(ours(diagnosis=Diagnosis(DiagStatus.PASSED, T - 60)), SINCE, (Action.RETURN, Reason.DIAG_PASSED),
                 id="should return a node whose diagnosis passed"),
    pytest.param(ours(diagnosis=Diagnosis(DiagStatus.PASSED, T - 200)), SINCE, (Action.DIAGNOSE, Reason.IDLE),
                 id="should not return a node on a diagnosis from before its suspicion"),
    pytest.param(ours(diagnosis=Diagnosis(DiagStatus.PASSED, T - 600), findings=XID79),
                 {"gpu-a800-01": NodeMemory(suspect_since=T - 700)},
                 (Action.DIAGNOSE, Reason.DIAG_FAILED), id="should not return a node whose finding persists"),
    pytest.param(ours(diagnosis=Diagnosis(DiagStatus.PASSED, T - 599), findings=XID79),
                 {"gpu-a800-01": NodeMemory(suspect_since=T - 700)}, (Action.WAIT, Reason.DIAG_PASSED),
                 id="should give a finding window_s from the diagnosis start to age out before counting a failure"),
    pytest.param(ours(diagnosis=Diagnosis(DiagStatus.PASSED, T - 60), findings=None), SINCE,
                 (Action.WAIT, Reason.STALE), id="should not return a node on stale samples"),
    pytest.param(ours(diagnosis=Diagnosis(DiagStatus.FAILED, T - 60)), SINCE, (Action.DIAGNOSE, Reason.DIAG_FAILED),
                 id="should diagnose again after a first failure"),
    pytest.param(ours(diagnosis=Diagnosis(DiagStatus.FAILED, T - 60)),
                 {"gpu-a800-01": NodeMemory(failures=(T - 90,), suspect_since=T - 100)},
                 (Action.HAND_OFF, Reason.DIAG_FAILED), id="should hand off after failures_before_handoff failures"),
    pytest.param(ours(kube=KubeView(cordoned=True, mark=Phase.SUSPECT, lent=True)), SINCE, (Action.WAIT, Reason.HELD),
                 id="should leave a node of its own alone once someone claims it"),
    pytest.param(node(findings=XID79), {"gpu-a800-01": NodeMemory(failures=(T - 5000,), returned_at=T - 3000)},
                 (Action.HAND_OFF, Reason.RELAPSE), id="should hand off a node suspect again soon after its return"),
    pytest.param(node(reason=f"{HANDED_REASON}: x", state="IDLE+DRAIN"), {}, (Action.WAIT, Reason.HANDED),
                 id="should do nothing more with a node handed to a human"),
])
def test_should_decide(view: NodeView, memory: dict[str, NodeMemory], expected: tuple[Action, Reason]) -> None:
    assert only(world(view, memory=memory))[:2] == expected


def test_should_count_one_failed_diagnosis_once_however_often_it_decides() -> None:
    failed = ours(diagnosis=Diagnosis(DiagStatus.FAILED, T - 60))
    memory = dict(SINCE)
    for _ in range(3):
        memory = dict(decide(world(failed, memory=memory), HEALTH, TIMEOUT_S).memory)
    assert memory["gpu-a800-01"].failures == (T - 60,)


def test_should_drain_no_more_than_the_budget_and_say_so() -> None:
    views = [node(f"gpu-a800-0{i}", findings=XID79) for i in range(1, 5)]
    decision = decide(World(T, tuple(views)), HEALTH, TIMEOUT_S)
    assert [d.action for d in decision.nodes] == [Action.DRAIN, Action.WAIT, Action.WAIT, Action.WAIT]
    assert {d.reason for d in decision.nodes[1:]} == {Reason.BUDGET} and (decision.budget, decision.held) == (1, 1)
    assert "the drain budget (25 % of the GPU nodes) is spent" in decision.nodes[1].detail


def test_should_pause_without_prometheus_slurm_or_kubectl() -> None:
    decision = decide(World(T, None, ("Prometheus at http://x: connection refused",)), HEALTH, TIMEOUT_S)
    assert decision.paused and decision.nodes == () and "connection refused" in decision.detail


def test_should_pause_when_no_node_has_a_fresh_sample() -> None:
    decision = decide(World(T, (node(findings=None), ours(findings=None))), HEALTH, TIMEOUT_S)
    assert decision.paused and decision.nodes == ()


# --- generated worlds ---------------------------------------------------------------------------------------------

FOREIGN_REASONS = (LEND, "node check failed: gpu-inventory: 7 of 8 GPUs", "operator: rack 3 maintenance")
findings = st.one_of(st.none(), st.just(()), st.just(XID79))
diagnoses = st.one_of(st.none(), st.builds(Diagnosis, st.sampled_from(DiagStatus),
                                           st.floats(T - 2 * TIMEOUT_S, T)))
slurm_views = st.one_of(st.none(), st.builds(
    SlurmView, st.sampled_from(["IDLE", "MIXED", "ALLOCATED", "IDLE+DRAIN", "MIXED+DRAIN", "DOWN+NOT_RESPONDING",
                                "IDLE+COMPLETING", "UNREADABLE"]),
    st.sampled_from(["", *FOREIGN_REASONS, f"{SUSPECT_REASON}: x", f"{HANDED_REASON}: x"])))
kube_views = st.one_of(st.none(), st.builds(
    KubeView, st.booleans(), st.sampled_from(["", Phase.SUSPECT.value, Phase.HANDED.value]), st.booleans(),
    st.sampled_from(["", "drill network_partition"]), st.integers(0, 2)))
memories = st.builds(NodeMemory, st.lists(st.floats(T - 400 * 3600, T), max_size=3).map(tuple),
                     st.one_of(st.none(), st.floats(T - 3600, T)), st.one_of(st.none(), st.floats(T - 400 * 3600, T)))


WINDOWS = ((), ("Sat,Sun 00:00-24:00",), ("Mon-Fri 22:00-06:00",), ("daily 13:00-14:00", "Wed 03:00-04:00"))
"""Maintenance windows the generated worlds draw from; T is a Monday, 13:46:40 UTC."""


@st.composite
def worlds(draw: st.DrawFn) -> tuple[World, Health]:
    count = draw(st.integers(1, 12))
    views = tuple(NodeView(f"n{i:02d}", draw(findings), draw(slurm_views), draw(kube_views), draw(diagnoses))
                  for i in range(count))
    memory = {v.name: draw(memories) for v in views if draw(st.booleans())}
    health = Health(max_drained_pct=draw(st.sampled_from([0, 10, 25, 50, 100])),
                    failures_before_handoff=draw(st.integers(1, 3)), diag_windows=draw(st.sampled_from(WINDOWS)))
    return World(T + draw(st.floats(0, 7 * 86_400)), views, (), memory), health


def claimed_elsewhere(view: NodeView) -> bool:
    """Someone else's mark, read from the raw views: a foreign Slurm reason, a lend or a hold label."""
    foreign = view.slurm is not None and view.slurm.reason in FOREIGN_REASONS
    return foreign or view.kube is not None and (view.kube.lent or bool(view.kube.held_by))


@settings(max_examples=200, deadline=None)
@given(worlds())
def test_should_never_drain_past_the_budget_nor_act_on_a_held_node(generated: tuple[World, Health]) -> None:
    state, health = generated
    assert state.nodes is not None
    decision = decide(state, health, TIMEOUT_S)
    budget = drain_budget(health, len(state.nodes))
    assert budget == math.floor(health.max_drained_pct * len(state.nodes) / 100 + 1e-9)
    if decision.paused:
        assert decision.nodes == () and all(v.findings is None for v in state.nodes)
        return
    views = {v.name: v for v in state.nodes}
    held_before = sum(phase(v) != Phase.NONE for v in state.nodes)
    new = [d for d in decision.nodes if d.action in (Action.DRAIN, Action.HAND_OFF)
           and phase(views[d.node]) == Phase.NONE]
    assert len(new) <= max(0, budget - held_before), (budget, held_before, new)
    for made in decision.nodes:
        view = views[made.node]
        if claimed_elsewhere(view):
            assert made.action == Action.WAIT, (view, made)
        if phase(view) == Phase.NONE and view.findings is None:
            assert made.action == Action.WAIT, (view, made)
        if made.action == Action.RETURN:
            assert view.diagnosis is not None and view.diagnosis.status == DiagStatus.PASSED and view.findings == ()
        if made.action == Action.DIAGNOSE:
            assert within(health.diag_windows, state.at), (health.diag_windows, state.at, made)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(WINDOWS[1:]), st.floats(0, 14 * 86_400),
       st.sampled_from([None, Diagnosis(DiagStatus.FAILED, T - 60)]))
def test_should_start_a_diagnosis_when_and_only_when_a_maintenance_window_holds(
        windows: tuple[str, ...], offset: float, diagnosis: Diagnosis | None) -> None:
    """An idle drained node (or one whose diagnosis failed once) is diagnosed inside a window and waits outside,
    its failure counted either way; a diagnosis already running is never stopped by a window closing."""
    health = Health(max_drained_pct=25, failures_before_handoff=3, diag_windows=windows)
    moment = T + offset
    memory = {"gpu-a800-01": NodeMemory(suspect_since=T - 100)}
    decision = decide(world(ours(diagnosis=diagnosis), memory=memory, at=moment), health, TIMEOUT_S)
    made = decision.nodes[0]
    if within(windows, moment):
        assert made.action == Action.DIAGNOSE
    else:
        assert (made.action, made.reason) == (Action.WAIT, Reason.WINDOW) and ", ".join(windows) in made.detail
    assert decision.memory["gpu-a800-01"].failures == ((T - 60,) if diagnosis else ())
    running = Diagnosis(DiagStatus.RUNNING, moment - 60)
    assert only(world(ours(diagnosis=running), memory=memory, at=moment), health)[:2] == (Action.WAIT,
                                                                                          Reason.DIAGNOSING)


def test_should_requeue_a_suspect_nodes_slurm_jobs_only_past_requeue_after_s() -> None:
    policy = Health(max_drained_pct=25, requeue_after_s=600)
    busy = ours(slurm=SlurmView("MIXED+DRAIN", f"{SUSPECT_REASON}: x"))
    pods = ours(kube=KubeView(cordoned=True, mark=Phase.SUSPECT, gpu_pods=1))

    def since(seconds: float) -> dict[str, NodeMemory]:
        return {"gpu-a800-01": NodeMemory(suspect_since=T - seconds)}

    assert only(world(busy, memory=since(599)), policy)[:2] == (Action.WAIT, Reason.DRAINING)
    assert only(world(busy, memory=since(600)), policy)[:2] == (Action.REQUEUE, Reason.DRAINING)
    assert only(world(busy, memory=since(10**6)))[:2] == (Action.WAIT, Reason.DRAINING)  # default: jobs finish
    # Kubernetes pods are not Slurm's to requeue: they finish.
    assert only(world(pods, memory=since(10**6)), policy)[:2] == (Action.WAIT, Reason.DRAINING)
