"""The lending decision: hysteresis, cooldown, step, floor, node choice, protected work and missing data, as rules;
then properties over any demand curve (the floor holds, moves are a cooldown apart); then the spec's lending
section (exact messages)."""

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.scheduling.lending_decision import (
    Action,
    Borrower,
    Decision,
    FlexNode,
    Job,
    Memory,
    Owner,
    Reason,
    Signals,
    State,
    decide,
    lent_gpu_models,
    lent_models,
    pool_replicas,
    replica_floors,
)
from components.site.lending import Lending
from tests.builders import parse, problems, prod_values, with_changes

SETTINGS = Lending(lend_waiting_per_replica=10, reclaim_waiting_per_replica=1, peak_s=300, trough_s=1800,
                   cooldown_s=600, max_step_nodes=1, training_floor_nodes=1)
T0 = 1_000_000.0
PEAK = dict(waiting=200.0, replicas=4.0, pending_pods=0.0)
TROUGH = dict(waiting=2.0, replicas=4.0, pending_pods=0.0)
STEADY = dict(waiting=20.0, replicas=4.0, pending_pods=0.0)


def tuned(**changes: Any) -> Lending:
    return Lending.model_validate({**SETTINGS.model_dump(), **changes})


def signals(at: float = T0, **demand: float | None) -> Signals:
    values: dict[str, Any] = {**STEADY, **demand}
    return Signals(at=at, **values)


GPU = "A800-SXM4-80GB"
WANTED = frozenset({GPU})
"""The GPU models of the served models that may use lent nodes, in most cases: the flex pool's."""


def idle(name: str, owner: Owner = Owner.SLURM, usable: bool = True, gpu: str = GPU) -> FlexNode:
    return FlexNode(name, owner, usable, gpu_model=gpu)


NO_MEMORY = Memory()
POOL_REPLICAS = 2.0
"""Replicas the kubernetes pool holds: fewer than the 4 of PEAK, TROUGH and STEADY."""


def flex_pool(nodes: tuple[FlexNode, ...] | None, memory: Memory = NO_MEMORY,
              wanted: frozenset[str] = WANTED) -> State:
    return State(nodes, memory, wanted_gpu_models=wanted, pool_replicas=POOL_REPLICAS)


def running(name: str, *jobs: tuple[str, bool, float]) -> FlexNode:
    """jobs: (QoS, preemptible by inference, seconds since its checkpoint)."""
    return FlexNode(name, Owner.SLURM, True, tuple(Job(str(i), qos, p, s) for i, (qos, p, s) in enumerate(jobs)),
                    gpu_model=GPU)


POOL = (idle("flex-1"), idle("flex-2"), idle("flex-3"))


def after_peak(nodes: tuple[FlexNode, ...] = POOL, s: Lending = SETTINGS, **memory: Any) -> Decision:
    """The decision once a peak has lasted exactly peak_s."""
    state = flex_pool(nodes, Memory(peak_since=T0, **memory))
    return decide(signals(T0 + s.peak_s, **PEAK), state, s)


def after_trough(nodes: tuple[FlexNode, ...], s: Lending = SETTINGS, **memory: Any) -> Decision:
    state = flex_pool(nodes, Memory(trough_since=T0, **memory))
    return decide(signals(T0 + s.trough_s, **TROUGH), state, s)


@pytest.mark.parametrize("missing", [
    pytest.param({"waiting": None}, id="should hold when the queue gauge is unreadable"),
    pytest.param({"replicas": None}, id="should hold when no replica count is readable"),
    pytest.param({"pending_pods": None}, id="should hold when pending pods are unreadable"),
    pytest.param({"waiting": math.nan}, id="should hold on NaN"),
    pytest.param({"waiting": None, "replicas": None, "pending_pods": None}, id="should hold when Prometheus is down"),
])
def test_should_never_move_on_missing_data(missing: dict[str, float | None]) -> None:
    lent = (idle("flex-1", Owner.LENT), idle("flex-2", Owner.LENDING), idle("flex-3"))
    memory = Memory(peak_since=T0 - 10_000, trough_since=T0 - 10_000, last_move_at=T0 - 10_000)
    decision = decide(signals(T0, **{**PEAK, **missing}), flex_pool(lent, memory), SETTINGS)
    assert (decision.action, decision.nodes, decision.reason) == (Action.HOLD, (), Reason.NO_DATA)
    assert decision.detail == f"no data for {', '.join(k for k in missing)}: holding"
    # The gap breaks "has lasted": both clocks start again; the last move stays.
    assert decision.memory == Memory(last_move_at=T0 - 10_000)


def test_should_never_move_when_the_flex_pool_is_unreadable() -> None:
    decision = decide(signals(T0, **PEAK), flex_pool(None, Memory(peak_since=T0 - 10_000)), SETTINGS)
    assert (decision.action, decision.detail) == (Action.HOLD, "no data for the flex pool: holding")


def test_should_wait_for_a_peak_to_last_before_lending() -> None:
    first = decide(signals(T0, **PEAK), flex_pool(POOL), SETTINGS)
    assert (first.action, first.reason, first.memory.peak_since) == (Action.HOLD, Reason.PEAK_TOO_SHORT, T0)
    almost = decide(signals(T0 + 299, **PEAK), flex_pool(POOL, first.memory), SETTINGS)
    assert (almost.action, almost.reason) == (Action.HOLD, Reason.PEAK_TOO_SHORT)
    assert almost.detail == ("200 waiting over 4 replicas (50.0 each), 0 inference pods pending: peak for 299 s of the "
                             "300 s a lend needs")
    lend = decide(signals(T0 + 300, **PEAK), flex_pool(POOL, almost.memory), SETTINGS)
    assert (lend.action, lend.nodes, lend.reason) == (Action.LEND, ("flex-1",), Reason.PEAK)
    assert lend.memory == Memory(peak_since=T0, last_move_at=T0 + 300, moves=(T0 + 300,))


def test_should_start_the_peak_clock_again_after_a_dip() -> None:
    dip = decide(signals(T0 + 200, **STEADY), flex_pool(POOL, Memory(peak_since=T0)), SETTINGS)
    assert (dip.reason, dip.memory.peak_since) == (Reason.STEADY, None)
    again = decide(signals(T0 + 400, **PEAK), flex_pool(POOL, dip.memory), SETTINGS)
    assert (again.action, again.memory.peak_since) == (Action.HOLD, T0 + 400)


@pytest.mark.parametrize(("demand", "expected"), [
    pytest.param({"waiting": 0.0, "pending_pods": 1.0}, Action.LEND, id="should lend for an inference pod pending"),
    pytest.param({"waiting": 40.0, "replicas": 4.0}, Action.LEND, id="should lend at the threshold exactly"),
    pytest.param({"waiting": 39.0, "replicas": 4.0}, Action.HOLD, id="should not lend just under the threshold"),
    pytest.param({"waiting": 3.0, "replicas": 0.0}, Action.LEND, id="should lend when requests wait for no replica"),
    pytest.param({"waiting": 0.0, "replicas": 0.0}, Action.HOLD, id="should not lend for no demand and no replica"),
])
def test_should_read_a_peak_from_the_queues_or_pending_pods(demand: dict[str, float], expected: Action) -> None:
    state = flex_pool(POOL, Memory(peak_since=T0 - 1000))
    assert decide(signals(T0, **demand), state, SETTINGS).action == expected


def test_should_not_move_again_within_the_cooldown() -> None:
    cooling = after_peak(last_move_at=T0 + SETTINGS.peak_s - 599)
    assert (cooling.action, cooling.reason) == (Action.HOLD, Reason.COOLDOWN)
    assert cooling.detail.endswith("cooldown: last move 599 s ago, 600 s between moves")
    assert after_peak(last_move_at=T0 + SETTINGS.peak_s - 600).action == Action.LEND


def test_should_move_at_most_max_step_nodes() -> None:
    assert after_peak(s=tuned(max_step_nodes=2)).nodes == ("flex-1", "flex-2")
    assert after_peak(s=tuned(max_step_nodes=5)).nodes == ("flex-1", "flex-2")  # the floor keeps one


@pytest.mark.parametrize(("nodes", "floor", "expected"), [
    pytest.param((idle("flex-1", Owner.LENT), idle("flex-2")), 1, (), id="should keep the floor in slurm"),
    pytest.param((idle("flex-1"), idle("flex-2", usable=False)), 1, (),
                 id="should not count a drained node toward the floor"),
    pytest.param((idle("flex-1"), idle("flex-2")), 0, ("flex-1",), id="should lend the last node at a zero floor"),
    pytest.param((idle("flex-1", usable=False), idle("flex-2"), idle("flex-3")), 1, ("flex-2",),
                 id="should never lend a node down or drained by someone else"),
])
def test_should_respect_the_training_floor(nodes: tuple[FlexNode, ...], floor: int,
                                           expected: tuple[str, ...]) -> None:
    decision = after_peak(nodes, tuned(training_floor_nodes=floor))
    assert decision.nodes == expected
    if not expected:
        assert (decision.action, decision.reason) == (Action.HOLD, Reason.NOTHING_LENDABLE)
        assert f"no flex node is lendable above the training floor of {floor} with a GPU" in decision.detail


def test_should_lend_only_nodes_whose_gpu_a_replica_past_the_pool_can_use() -> None:
    """An idle RTX 4090 flex node is passed over for a busy A800 one when only an A800 model may use lent nodes; with
    no model that may, nothing is lent at all."""
    nodes = (idle("flex-4090", gpu="RTX-4090"), running("flex-a800", ("train_preemptible", True, 60.0)),
             idle("flex-spare", gpu="RTX-4090"))
    state = flex_pool(nodes, Memory(peak_since=T0))
    assert decide(signals(T0 + SETTINGS.peak_s, **PEAK), state, SETTINGS).nodes == ("flex-a800",)
    nobody = decide(signals(T0 + SETTINGS.peak_s, **PEAK), flex_pool(nodes, Memory(peak_since=T0), frozenset()),
                    SETTINGS)
    assert (nobody.action, nobody.reason) == (Action.HOLD, Reason.NOTHING_LENDABLE)
    assert nobody.detail.endswith("with a GPU the replicas past the kubernetes pool use (none)")


def test_should_reclaim_once_the_models_ask_no_more_replicas_than_the_pool_holds() -> None:
    """Two replicas at the autoscaler's own target (5 waiting each, over the reclaim threshold of 1) fit the pool's 2:
    a trough, so the lent node goes back after trough_s instead of waiting for the queues to empty; three replicas
    at the same queue length are not one."""
    lent = (idle("flex-1", Owner.LENT), idle("flex-2"))
    at_target = {"waiting": 10.0, "replicas": 2.0, "pending_pods": 0.0}
    state = flex_pool(lent, Memory(trough_since=T0))
    decision = decide(signals(T0 + SETTINGS.trough_s, **at_target), state, SETTINGS)
    assert (decision.action, decision.nodes, decision.reason) == (Action.RECLAIM, ("flex-1",), Reason.TROUGH)
    past_pool = {"waiting": 15.0, "replicas": 3.0, "pending_pods": 0.0}
    held = decide(signals(T0 + SETTINGS.trough_s, **past_pool), state, SETTINGS)
    assert (held.action, held.reason, held.memory.trough_since) == (Action.HOLD, Reason.STEADY, None)


def test_should_want_the_gpus_of_the_models_with_lent_replicas() -> None:
    site = parse(prod_values())
    assert lent_gpu_models(site) == {"A800-SXM4-80GB"}
    assert (lent_models(site), pool_replicas(site)) == (["qwen2-5-72b"], 4)
    qwen, llama = site.inference.models
    both = [qwen, llama.model_copy(update={"lent_replicas": 8})]
    assert lent_gpu_models(site.model_copy(update={"inference": site.inference.model_copy(
        update={"models": both})})) == {"A800-SXM4-80GB", "RTX-4090"}


def test_should_lend_idle_nodes_first_then_the_least_work_lost() -> None:
    nodes = (running("flex-a", ("train_preemptible", True, 3600)),
             running("flex-b", ("train_preemptible", True, 60), ("train_preemptible", True, 7200)),
             running("flex-c", ("train_preemptible", True, 600)),
             idle("flex-z"),
             idle("flex-spare"))
    decision = after_peak(nodes, tuned(max_step_nodes=4))
    # Idle first; then by the most work any of the node's jobs would lose.
    assert decision.nodes == ("flex-spare", "flex-z", "flex-c", "flex-a")


@pytest.mark.parametrize("protected", ["train_normal", "train_high", "critical", "inference"])
def test_should_never_lend_a_node_running_work_the_table_protects(protected: str) -> None:
    nodes = (running("flex-1", (protected, False, 10), ("train_preemptible", True, 10)),
             running("flex-2", (protected, False, 10)), idle("flex-3"))
    decision = after_peak(nodes, tuned(max_step_nodes=3, training_floor_nodes=0))
    assert decision.nodes == ("flex-3",)


def test_should_finish_a_lend_under_way_without_waiting_for_the_cooldown() -> None:
    nodes = (idle("flex-1", Owner.LENDING), idle("flex-2"))
    decision = decide(signals(T0, **STEADY), flex_pool(nodes, Memory(last_move_at=T0 - 5)), SETTINGS)
    assert (decision.action, decision.nodes, decision.reason) == (Action.LEND, ("flex-1",), Reason.FINISH_LEND)
    assert decision.memory.last_move_at == T0 - 5  # the same move, not a new one


def test_should_wait_for_a_trough_to_last_before_reclaiming() -> None:
    nodes = (idle("flex-1", Owner.LENT), idle("flex-2"))
    first = decide(signals(T0, **TROUGH), flex_pool(nodes), SETTINGS)
    assert (first.action, first.reason, first.memory.trough_since) == (Action.HOLD, Reason.TROUGH_TOO_SHORT, T0)
    back = after_trough(nodes)
    assert (back.action, back.nodes, back.reason) == (Action.RECLAIM, ("flex-1",), Reason.TROUGH)
    assert back.memory.last_move_at == T0 + SETTINGS.trough_s
    assert after_trough(nodes, last_move_at=T0 + SETTINGS.trough_s - 1).reason == Reason.COOLDOWN


def test_should_reclaim_a_node_still_draining_before_a_serving_one() -> None:
    nodes = (idle("flex-1", Owner.LENT), idle("flex-2", Owner.LENDING), idle("flex-3", Owner.LENT))
    assert after_trough(nodes, tuned(max_step_nodes=2)).nodes == ("flex-2", "flex-1")


def test_should_hold_in_a_trough_with_nothing_lent() -> None:
    decision = after_trough(POOL)
    assert (decision.action, decision.reason) == (Action.HOLD, Reason.NOTHING_LENT)


def test_should_not_call_a_trough_while_a_pod_is_pending() -> None:
    nodes = (idle("flex-1", Owner.LENT), idle("flex-2"))
    decision = decide(signals(T0 + 5000, **{**TROUGH, "pending_pods": 1.0}), flex_pool(nodes, Memory(trough_since=T0)),
                      SETTINGS)
    assert decision.memory.trough_since is None and decision.action != Action.RECLAIM


SLO = tuned(ttft_objective_s=2.0)


@pytest.mark.parametrize(("demand", "expected"), [
    pytest.param({**TROUGH, "ttft_p95_s": 2.5}, Action.LEND, id="should lend when the latency objective is missed"),
    pytest.param({**TROUGH, "ttft_p95_s": 2.0}, Action.HOLD, id="should not lend at the objective exactly"),
    pytest.param({**STEADY, "ttft_p95_s": math.nan}, Action.HOLD,
                 id="should read no first token in the window as nothing slow"),
])
def test_should_read_a_peak_from_the_latency_objective(demand: dict[str, float], expected: Action) -> None:
    decision = decide(signals(T0, **demand), flex_pool(POOL, Memory(peak_since=T0 - 1000)), SLO)
    assert decision.action == expected, decision.detail


def test_should_not_call_a_trough_while_the_latency_objective_is_missed() -> None:
    nodes = (idle("flex-1", Owner.LENT), idle("flex-2"))
    slow = decide(signals(T0, **{**TROUGH, "ttft_p95_s": 3.0}), flex_pool(nodes, Memory(trough_since=T0 - 5000)), SLO)
    assert slow.action != Action.RECLAIM and slow.memory.trough_since is None
    assert slow.detail.startswith("2 waiting over 4 replicas (0.5 each), 0 inference pods pending, p95 time to first "
                                  "token 3.00 s (objective 2 s): ")
    fast = decide(signals(T0, **{**TROUGH, "ttft_p95_s": 0.4}), flex_pool(nodes, Memory(trough_since=T0 - 5000)), SLO)
    assert (fast.action, fast.nodes) == (Action.RECLAIM, ("flex-1",))


def test_should_hold_when_the_latency_it_needs_is_unreadable_and_ignore_it_without_an_objective() -> None:
    state = flex_pool(POOL, Memory(peak_since=T0 - 1000))
    held = decide(signals(T0, **PEAK, ttft_p95_s=None), state, SLO)
    assert (held.action, held.detail) == (Action.HOLD, "no data for ttft_p95_s: holding")
    assert decide(signals(T0, **PEAK, ttft_p95_s=None), state, SETTINGS).action == Action.LEND


# Demand per step: peak, trough, steady or unreadable; nodes move as the decision says, at once.
DEMAND = st.lists(st.sampled_from([PEAK, TROUGH, STEADY, {"waiting": None}]), min_size=1, max_size=200)


@settings(max_examples=300, deadline=None)
@given(DEMAND, st.integers(0, 3), st.integers(1, 3), st.sampled_from([30, 60, 300]))
def test_should_hold_the_floor_and_space_moves_whatever_the_demand(
        curve: list[dict[str, float | None]], floor: int, step: int, interval: int) -> None:
    lending = tuned(training_floor_nodes=floor, max_step_nodes=step)
    owners = {f"flex-{i}": Owner.SLURM for i in range(4)}
    memory, moves = Memory(), []
    for i, demand in enumerate(curve):
        at = T0 + i * interval
        nodes = tuple(FlexNode(n, o, gpu_model=GPU) for n, o in owners.items())
        decision = decide(signals(at, **demand), flex_pool(nodes, memory), lending)
        memory = decision.memory
        if decision.action != Action.HOLD:
            assert demand != {"waiting": None}  # never on missing data
            assert len(decision.nodes) <= step
            moves.append(at)
        for name in decision.nodes:
            owners[name] = Owner.LENT if decision.action == Action.LEND else Owner.SLURM
        assert sum(o == Owner.SLURM for o in owners.values()) >= min(floor, 4)
    assert all(b - a >= lending.cooldown_s for a, b in zip(moves, moves[1:], strict=False))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([PEAK, TROUGH, STEADY]), min_size=1, max_size=400), st.integers(3, 6),
       st.sampled_from([0, 60, 600]))
def test_should_never_reach_the_flapping_alert_with_one_lendable_node_whatever_the_demand(
        curve: list[dict[str, float | None]], flapping: int, cooldown: int) -> None:
    """Lend and reclaim after 30 s, every 30 s: only the reclaim's budget keeps the moves of any flapping window under
    LendingFlapping's threshold."""
    lending = tuned(peak_s=30, trough_s=30, cooldown_s=cooldown, flapping_moves=flapping, flapping_window_h=1)
    owners = {"flex-1": Owner.SLURM, "flex-2": Owner.SLURM}
    memory, moves = Memory(), []
    for i, demand in enumerate(curve):
        at = T0 + i * 30
        nodes = tuple(FlexNode(n, o, gpu_model=GPU) for n, o in owners.items())
        decision = decide(signals(at, **demand), flex_pool(nodes, memory), lending)
        memory = decision.memory
        if decision.action != Action.HOLD:
            moves.append(at)
        for name in decision.nodes:
            owners[name] = Owner.LENT if decision.action == Action.LEND else Owner.SLURM
    assert all(sum(0 <= at - t < 3600 for t in moves) < flapping for at in moves)


def test_should_hold_a_reclaim_that_leaves_no_room_for_the_next_lend_under_the_alert() -> None:
    """LendingFlapping fires at 4 moves in 1 h: lent, reclaimed and lent again within the hour, the node stays lent
    until the first two moves have left the window (less the cooldown a later lend waits anyway)."""
    lending = tuned(trough_s=60, flapping_moves=4, flapping_window_h=1)
    nodes = (idle("flex-1", Owner.LENT), idle("flex-2"))
    moves = (T0 - 2400, T0 - 1800, T0 - 900)
    held = decide(signals(T0 + 60, **TROUGH), flex_pool(nodes, Memory(trough_since=T0, last_move_at=T0 - 900,
                                                                       moves=moves)), lending)
    assert (held.action, held.reason) == (Action.HOLD, Reason.MOVE_BUDGET)
    assert held.detail == ("2 waiting over 4 replicas (0.5 each), 0 inference pods pending: trough for 60 s, but 3 "
                           "moves in the last 1 h: this reclaim and a lend 600 s later would reach 5, LendingFlapping "
                           "fires at 4; reclaim possible in 1140 s")
    # At T0 + 1200 the first move has left the window, and a lend 600 s later finds the second gone too.
    back = decide(signals(T0 + 1200, **TROUGH), flex_pool(nodes, held.memory), lending)
    assert (back.action, back.nodes) == (Action.RECLAIM, ("flex-1",))
    assert back.memory.moves == (T0 - 1800, T0 - 900, T0 + 1200)
    assert decide(signals(T0 + 1199, **TROUGH), flex_pool(nodes, held.memory), lending).reason == Reason.MOVE_BUDGET


def test_should_reclaim_at_once_after_a_lone_lend() -> None:
    lending = tuned(trough_s=30, flapping_moves=4)
    nodes = (idle("flex-1", Owner.LENT), idle("flex-2"))
    memory = Memory(trough_since=T0, last_move_at=T0 - 600, moves=(T0 - 600,))
    assert decide(signals(T0 + 30, **TROUGH), flex_pool(nodes, memory), lending).action == Action.RECLAIM


QWEN = Borrower("qwen", GPU, gpus_per_replica=4, min_replicas=1, pool_replicas=4, lent_replicas=2)


@pytest.mark.parametrize(("models", "lent", "trough", "expected"), [
    pytest.param([QWEN], {GPU: 8}, False, {"qwen": 6}, id="should fill a lent node with the replicas it fits"),
    pytest.param([QWEN], {GPU: 16}, False, {"qwen": 6}, id="should stop at lent_replicas"),
    pytest.param([QWEN], {GPU: 8}, True, {"qwen": 1}, id="should lift the floor at a trough"),
    pytest.param([QWEN], {}, False, {"qwen": 1}, id="should keep replicas.min with nothing lent"),
    pytest.param([QWEN], {"RTX-4090": 8}, False, {"qwen": 1}, id="should not fill nodes of another GPU"),
    pytest.param([Borrower("wide", GPU, 3, 1, 2, 4)], {GPU: 8}, False, {"wide": 4},
                 id="should fit whole replicas only"),
    pytest.param([QWEN, Borrower("small", GPU, 1, 2, 8, 8)], {GPU: 16}, False, {"qwen": 6, "small": 16},
                 id="should share lent GPUs in the spec's order"),
])
def test_should_set_replica_floors_that_fill_the_lent_gpus(models: list[Borrower], lent: dict[str, int],
                                                           trough: bool, expected: dict[str, int]) -> None:
    assert replica_floors(models, lent, trough) == expected


def test_should_move_no_more_than_the_hysteresis_allows_on_a_fast_oscillation() -> None:
    """A demand that flips between peak and trough every 4 minutes never lasts the 5-minute peak or the 30-minute
    trough: no move at all."""
    owners = {"flex-1": Owner.SLURM, "flex-2": Owner.SLURM}
    memory, moves = Memory(), 0
    for minute in range(24 * 60):
        demand = PEAK if (minute // 4) % 2 == 0 else TROUGH
        nodes = tuple(FlexNode(n, o, gpu_model=GPU) for n, o in owners.items())
        decision = decide(signals(T0 + minute * 60, **demand), flex_pool(nodes, memory), SETTINGS)
        memory, moves = decision.memory, moves + (decision.action != Action.HOLD)
    assert moves == 0


def test_should_move_once_per_peak_and_once_per_trough_on_a_slow_oscillation() -> None:
    """Two-hour peaks and troughs for a day, with the production settings (5 min peak, 30 min trough, 10 min
    cooldown): each peak lends one node, each trough takes it back, and nothing else moves."""
    owners = {"flex-1": Owner.SLURM, "flex-2": Owner.SLURM}
    memory, moves = Memory(), []
    for minute in range(24 * 60):
        demand = PEAK if (minute // 120) % 2 == 0 else TROUGH
        nodes = tuple(FlexNode(n, o, gpu_model=GPU) for n, o in owners.items())
        decision = decide(signals(T0 + minute * 60, **demand), flex_pool(nodes, memory), Lending())
        memory = decision.memory
        if decision.action != Action.HOLD:
            moves.append((minute, decision.action))
            for name in decision.nodes:
                owners[name] = Owner.LENT if decision.action == Action.LEND else Owner.SLURM
    assert moves == [(cycle * 240 + offset, action) for cycle in range(6)
                     for offset, action in ((5, Action.LEND), (150, Action.RECLAIM))]


@pytest.mark.parametrize(("change", "expected"), [
    pytest.param({"lending": {"reclaim_waiting_per_replica": 10}},
                 "lending: Value error, reclaim_waiting_per_replica (10) must be under lend_waiting_per_replica "
                 "(10), or one queue length would both lend and reclaim",
                 id="should refuse a reclaim threshold not under the lend threshold"),
    pytest.param({"lending": {"training_floor_nodes": 2}},
                 "lending.training_floor_nodes: a floor of 2 keeps all 2 flex nodes in Slurm: the controller could "
                 "never lend one", id="should refuse a floor that keeps the whole flex pool"),
    pytest.param({"inference__models__0__lent_replicas": 0},
                 "inference.models[].lent_replicas: 1 of the 2 A800-SXM4-80GB flex nodes can be lent (8 GPUs above "
                 "lending.training_floor_nodes 1), but no served A800-SXM4-80GB model has lent_replicas over 0: a "
                 "lend would serve no one", id="should refuse a flex pool no model may use once lent"),
    pytest.param({"inference__models__0__lent_replicas": 3},
                 "inference.models[0].lent_replicas: 3 replicas of 4 A800-SXM4-80GB GPUs need more than the 2 that "
                 "fit on the 1 of 2 A800-SXM4-80GB flex nodes the controller may lend",
                 id="should refuse lent replicas past the lendable flex nodes"),
    pytest.param({"inference__models__1__lent_replicas": 1},
                 "inference.models[1].lent_replicas: 1 replicas of 1 RTX-4090 GPUs need more than the 0 that fit on "
                 "the 0 of 0 RTX-4090 flex nodes the controller may lend",
                 id="should refuse lent replicas of a gpu with no flex node"),
    pytest.param({"lending": {"max_step_nodes": True}},
                 "lending.max_step_nodes: Value error, a boolean is not a number",
                 id="should refuse a boolean step"),
    pytest.param({"lending": {"peak_s": 0}}, "lending.peak_s: Input should be greater than 0",
                 id="should refuse a peak that need not last"),
    pytest.param({"lending": {"ttft_objective_s": 0}}, "lending.ttft_objective_s: Input should be greater than 0",
                 id="should refuse a latency objective of no time"),
    pytest.param({"lending": {"flapping_window_h": 25}}, "lending.flapping_window_h: Input should be less than or "
                 "equal to 24", id="should refuse a flapping window over a day"),
])
def test_should_refuse_lending_settings_that_cannot_work(change: dict[str, Any], expected: str) -> None:
    found = problems(with_changes(prod_values(), **change))
    assert any(p.startswith(expected) for p in found), found
