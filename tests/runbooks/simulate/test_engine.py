"""The simulator against cases worked out by hand, and against itself."""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from components.site.lending import Lending
from components.site.site import Pool, Site
from runbooks.simulate import engine
from runbooks.simulate.compare import at_stage
from runbooks.simulate.engine import Outcome, Policy, Run, Simulation, simulate
from runbooks.simulate.results import figures
from runbooks.simulate.site_model import SiteModel, SlurmNode, StaticSlices, site_model, static_slices
from runbooks.simulate.traces import Trace
from runbooks.simulate.workload import InferenceDemand, Mapping, Side, SimJob, Workload, build
from tests.builders import parse, prod_values

TRACES = Path(__file__).resolve().parents[4] / "shared" / "traces"
FLAVOR = "a800-kubernetes"
HOUR = 3600.0


def small_site(nodes: list[SlurmNode], flavor_gpus: int = 0, flex_qos: frozenset[str] | None = None) -> SiteModel:
    """Two teams, a and b, with equal fairshare; the default table's QoS and classes, cut to what the cases use; the
    flex nodes admit flex_qos (None: every QoS)."""
    return SiteModel(
        nodes=nodes, flavors={FLAVOR: ("A800", flavor_gpus)} if flavor_gpus else {}, teams=["a", "b"],
        fairshare={"a": 1, "b": 1}, quota={("a", FLAVOR): 8, ("b", FLAVOR): 8},
        guaranteed={("a", FLAVOR): 0, ("b", FLAVOR): 0},
        qos_priority={"train_normal": 1000, "train_preemptible": 100},
        qos_preempts={"train_normal": {"train_preemptible"}, "train_preemptible": set()},
        class_priority={"inference": 10_000_000, "dev": 1000}, class_preempts={"inference": {"dev"}, "dev": set()},
        inference_class="inference", lending_preempts={"train_preemptible"}, flex_qos=flex_qos)


def job(id: int, team: str, at_h: float, gpus: int, hours: float, qos: str = "train_normal") -> SimJob:
    return SimJob(id, team, at_h * HOUR, gpus, hours * HOUR, Side.SLURM, qos, "dev")


def waits_h(outcome: Outcome) -> dict[int, float]:
    return {r.job.id: (r.first_start - r.job.arrival_s) / HOUR for r in outcome.runs if r.first_start is not None}


def conserved(outcome: Outcome) -> None:
    """Every GPU-second allocated to training is either kept as progress or lost to a preemption."""
    assert outcome.training_gpu_s == pytest.approx(sum(r.done_gpu_s + r.lost_gpu_s for r in outcome.runs))


# Team a holds 4 of 8 GPUs for 2 h; team b's 8-GPU gang arrives at 0.5 h, its 4-GPU 3-h job at 1 h.
GANG = Workload([job(0, "a", 0, 4, 2), job(1, "b", 0.5, 8, 1), job(2, "b", 1, 4, 3)], [], 48 * HOUR, 1.0,
                0.0)
ONE_NODE = [SlurmNode("s1", Pool.SLURM, "A800", 8)]


def test_gang_waits_for_the_gpus_and_backfill_keeps_its_reservation() -> None:
    """This stack: the gang waits until a's job ends at 2 h (1.5 h); b's 4-GPU job would fit at 1 h, but ends after
    the gang's reservation, so EASY backfill holds it until the gang ends at 3 h (2 h)."""
    outcome = simulate(small_site(ONE_NODE), GANG, Policy.STACK, Lending(), 1800, StaticSlices({}, {}, {}))
    assert waits_h(outcome) == {0: 0.0, 1: 1.5, 2: 2.0}
    conserved(outcome)


def test_static_slice_runs_the_gang_narrower_for_longer() -> None:
    """Static, 4 GPUs each: b's gang runs at once on its 4 GPUs for 2 h (same GPU-hours), b's next job waits until it
    ends at 2.5 h (1.5 h)."""
    outcome = simulate(small_site(ONE_NODE), GANG, Policy.STATIC, Lending(), 1800,
                       StaticSlices({"a": 4, "b": 4}, {}, {}))
    assert waits_h(outcome) == {0: 0.0, 1: 0.0, 2: 1.5}
    gang = next(r for r in outcome.runs if r.job.id == 1)
    assert (gang.gpus, gang.finished) == (4, 2.5 * HOUR)
    conserved(outcome)


# Two 8-GPU preemptible jobs fill the Slurm node and the flex node; inference (4 GPUs a replica, 8 GPUs of flavor)
# has 2.4 replicas' worth of load from 1200 s to 3000 s, 0.4 otherwise; the autoscaler keeps each replica at most
# 5/6 busy (5 waiting), so it asks 3 replicas, then 1: two of them on the flavor (replicas.max), the third only on a
# lent node (lent_replicas 2).
LENDING = Lending(peak_s=60, trough_s=600, cooldown_s=0, interval_s=30, max_step_nodes=1, training_floor_nodes=0)
MODEL = InferenceDemand("m", "A800", 4, 1, 2, 2, 5, 600, [0.4, 0.4, 2.4, 2.4, 2.4, 0.4, 0.4])
LEND_WORKLOAD = Workload([job(0, "a", 0, 8, 10, "train_preemptible"), job(1, "a", 0, 8, 10, "train_preemptible")],
                         [MODEL], 4200, 1.0, 0.0)
FLEX_SITE = [SlurmNode("s1", Pool.SLURM, "A800", 8), SlurmNode("f1", Pool.FLEX, "A800", 8)]


def test_lending_serves_the_peak_with_the_flex_node_and_gives_it_back() -> None:
    """At 1200 s the model asks 3 replicas and gets 2 (a pod pending); the peak has lasted peak_s at 1260 s, decide()
    lends f1, requeueing its preemptible job (1260 s run, last checkpoint at 1200 s: 60 s x 8 GPUs lost), and the
    controller raises the model's floor to the 2 replicas past the pool f1 fits (replica_floors), so f1 carries two
    replicas, not the one the queue asked (0.6 busy each: 1.5 waiting, between the thresholds). The trough starts at
    3000 s (0.4 of 1 replica: 0.67 waiting), the floor drops and f1 empties; it has lasted trough_s at 3600 s: f1 goes
    back and the requeued job starts again on it."""
    outcome = simulate(small_site(FLEX_SITE, 8), LEND_WORKLOAD, Policy.STACK, LENDING, 600, StaticSlices({}, {}, {}))
    result = figures(outcome)
    assert outcome.covered_s == {"m": 4140, "all": 4140}  # uncovered 1200-1260 s
    assert result.lent_peak_gpus == 8
    # f1 lent from 1260 s to 3600 s, its two replicas on all 8 of its GPUs until the load falls at 3000 s.
    assert result.lent_gpu_h == pytest.approx(8 * 2340 / HOUR)
    assert result.lent_serving_pct == pytest.approx(100 * 8 * 1740 / (8 * 2340))
    assert result.lost_gpu_h == pytest.approx(480 / HOUR)
    requeued = next(r for r in outcome.runs if r.job.id == 1)
    assert requeued.started == 3600 and requeued.lost_gpu_s == 480
    assert outcome.allocated_gpu_s == {"slurm": 8 * 4200,
                                       "flex": 8 * 1260 + 8 * (3000 - 1260) + 8 * (4200 - 3600),
                                       "kubernetes": 4 * 1200 + 8 * 1800 + 4 * 1200}
    conserved(outcome)


def test_static_inference_is_held_to_its_slice() -> None:
    """Static: 8 GPUs serve 2 of the 3 replicas asked from 1200 s to 3000 s; nothing is lent or lost."""
    outcome = simulate(small_site(FLEX_SITE, 8), LEND_WORKLOAD, Policy.STATIC, LENDING, 600,
                       StaticSlices({"a": 16, "b": 0}, {("a", FLAVOR): 0, ("b", FLAVOR): 0}, {FLAVOR: 8}))
    result = figures(outcome)
    assert outcome.covered_s["all"] == 4200 - 1800
    assert (result.lent_peak_gpus, result.lost_gpu_h) == (0, 0)
    conserved(outcome)


@pytest.fixture(scope="module")
def prod_site() -> Site:
    """Prod with every team onboarded, as gpuctl simulate replays it by default."""
    return at_stage(parse(prod_values()), None)


def test_static_with_room_for_everything_never_queues(prod_site: Site) -> None:
    """Static slices as large as any demand: every job of three days of the Gavel trace starts as it arrives."""
    model = site_model(prod_site)
    workload = build(prod_site, model.teams, TRACES, Mapping(Trace.GAVEL, days=3))
    huge = 10_000
    big = replace(model, nodes=[SlurmNode(f"n{i}", Pool.SLURM, "A800", 8) for i in range(huge)],
                  flavors={f: (m, huge) for f, (m, _) in model.flavors.items()})
    slices = StaticSlices(dict.fromkeys(model.teams, huge), {(t, f): huge for t in model.teams for f in model.flavors},
                          dict.fromkeys(model.flavors, huge))
    outcome = simulate(big, workload, Policy.STATIC, prod_site.lending, 1800, slices)
    assert len(outcome.runs) == len(workload.jobs) > 20
    assert all(r.first_start == r.job.arrival_s and r.gpus == r.job.gpus for r in outcome.runs)
    # Every request is served (the peak offers replicas.max's worth), but at the peak qwen's 4 replicas are more
    # than 10/11 busy, past the autoscaler's target: not served in full then.
    result = figures(outcome)
    assert result.inference_served_pct == 100
    assert result.model_covered_pct["llama-3-1-8b"] == 100 > result.model_covered_pct["qwen2-5-72b"]


@pytest.mark.parametrize("policy", list(Policy))
def test_gpu_hours_are_conserved_on_prod(prod_site: Site, policy: Policy) -> None:
    """Alibaba's pods for two days on prod: training GPU-hours are progress or preemption losses, and what the pools
    allocated is training plus the GPUs inference held."""
    model = site_model(prod_site)
    workload = build(prod_site, model.teams, TRACES, Mapping(Trace.ALIBABA, days=2))
    outcome = simulate(model, workload, policy, prod_site.lending, 1800, static_slices(model, prod_site))
    conserved(outcome)
    inference = sum(outcome.allocated_gpu_s.values()) - outcome.training_gpu_s
    # prod's models ask at most (4 + 2 lent) x 4 A800s and 24 RTX 4090s
    assert 0 < inference <= 48 * outcome.window_s
    if policy == Policy.STACK:
        assert figures(outcome).lost_gpu_h > 0  # inference evicted Kubernetes jobs at its peaks


def test_demand_past_every_replica_the_site_allows_is_reported_unserved(prod_site: Site) -> None:
    """Three times replicas.max's worth of load at the peak: more than replicas.max plus lent_replicas can serve, so
    neither world serves every request, and the stack, with its lent replicas, serves more of them."""
    model = site_model(prod_site)
    workload = build(prod_site, model.teams, TRACES, Mapping(Trace.GAVEL, days=2, inference_peak=3))
    served = {policy: figures(simulate(model, workload, policy, prod_site.lending, 1800,
                                       static_slices(model, prod_site)))
              for policy in Policy}
    assert served[Policy.STATIC].inference_served_pct < served[Policy.STACK].inference_served_pct < 100
    assert served[Policy.STACK].inference_covered_pct < 100
    assert served[Policy.STACK].lent_gpu_h > 0 and served[Policy.STACK].lent_serving_pct > 0


def test_lent_gpus_serve_only_models_of_their_gpu() -> None:
    """A second model on another GPU, served from its own flavor, keeps every replica while the A800 model uses the
    lent A800 node: lent GPUs are counted per GPU model."""
    site = small_site(FLEX_SITE, 8)
    site = replace(site, flavors={**site.flavors, "rtx4090-kubernetes": ("RTX-4090", 4)},
                   quota={**site.quota, ("a", "rtx4090-kubernetes"): 0, ("b", "rtx4090-kubernetes"): 0})
    small = InferenceDemand("small", "RTX-4090", 1, 1, 4, 0, 5, 600, [1.5] * 7)
    workload = replace(LEND_WORKLOAD, inference=[MODEL, small])
    outcome = simulate(site, workload, Policy.STACK, LENDING, 600, StaticSlices({}, {}, {}))
    assert outcome.covered_s == {"m": 4140, "small": 4200, "all": 4140}
    assert figures(outcome).lent_peak_gpus == 8


def test_a_flex_node_is_lent_as_soon_as_its_protected_job_ends() -> None:
    """f1 runs a train_normal job, which inference may not requeue, until 1500 s: at the peak decide() finds nothing
    lendable, and the controller lends f1 at the first tick after the job ends (1500 s, on its 30-s grid), not at the
    next demand step (1800 s)."""
    workload = replace(LEND_WORKLOAD, jobs=[job(0, "a", 0, 8, 10, "train_preemptible"),
                                            job(1, "a", 0, 8, 1500 / HOUR, "train_normal")])
    outcome = simulate(small_site(FLEX_SITE, 8), workload, Policy.STACK, LENDING, 600, StaticSlices({}, {}, {}))
    assert outcome.covered_s["all"] == 4200 - (1500 - 1200)
    assert figures(outcome).lost_gpu_h == 0  # the lend requeued nothing


@pytest.mark.parametrize(
    ("flex_qos", "waits"),
    [
        pytest.param(frozenset({"train_preemptible"}), {0: 0.0, 1: 2.0, 2: 0.0},
                     id="a train_normal job the flex partition refuses waits for the slurm pool's node"),
        pytest.param(None, {0: 0.0, 1: 0.0, 2: 1.0}, id="with every QoS admitted it takes the flex node"),
    ],
)
def test_a_job_runs_on_flex_nodes_only_if_the_flex_partitions_admit_its_qos(
        flex_qos: frozenset[str] | None, waits: dict[int, float]) -> None:
    """Two 8-GPU train_normal jobs (2 h, 1 h) and an 8-GPU train_preemptible one (1 h) at 0 on one slurm-pool and one
    flex node: admitting train_preemptible alone, the second train_normal job waits for the first, and the
    preemptible one runs on the flex node at once."""
    workload = Workload([job(0, "a", 0, 8, 2), job(1, "b", 0, 8, 1), job(2, "a", 0, 8, 1, "train_preemptible")], [],
                        48 * HOUR, 1.0, 0.0)
    outcome = simulate(small_site(FLEX_SITE, flex_qos=flex_qos), workload, Policy.STACK, Lending(), 1800,
                       StaticSlices({}, {}, {}))
    assert waits_h(outcome) == waits
    conserved(outcome)


def test_no_job_of_a_qos_the_flex_partitions_refuse_runs_on_prod_flex_nodes(
        prod_site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two days of Alibaba's pods on prod (LS -> train_normal, BE -> train_preemptible): the flex nodes, which admit
    train_preemptible alone in the rendered slurm.conf, run only it, and do run it."""
    model = site_model(prod_site)
    assert model.flex_qos == frozenset({"train_preemptible"})
    flex = {n.name for n in model.nodes if n.pool == Pool.FLEX}
    on_flex: dict[str, int] = {}
    start = Simulation._start

    def recorded(self: Simulation, run: Run, held: dict[str, int]) -> None:
        if run.side == Side.SLURM:
            on_flex[run.qos] = on_flex.get(run.qos, 0) + sum(g for n, g in held.items() if n in flex)
        start(self, run, held)

    monkeypatch.setattr(Simulation, "_start", recorded)
    workload = build(prod_site, model.teams, TRACES, Mapping(Trace.ALIBABA, days=2))
    simulate(model, workload, Policy.STACK, prod_site.lending, 1800, static_slices(model, prod_site))
    assert on_flex["train_normal"] == 0 and on_flex["train_preemptible"] > 0, on_flex


def test_the_same_workload_gives_the_same_figures(prod_site: Site) -> None:
    """Ties among preemption victims break by job, never by where Python put a job in memory."""
    model = site_model(prod_site)
    workload = build(prod_site, model.teams, TRACES, Mapping(Trace.ALIBABA, days=2))
    first, second = (simulate(model, workload, Policy.STACK, prod_site.lending, 1800, static_slices(model, prod_site))
                     for _ in range(2))
    assert first.allocated_gpu_s == second.allocated_gpu_s
    assert [(r.first_start, r.lost_gpu_s) for r in first.runs] == [(r.first_start, r.lost_gpu_s) for r in second.runs]


def kube_job(id: int, team: str, at_h: float, gpus: int, hours: float, priority_class: str) -> SimJob:
    return SimJob(id, team, at_h * HOUR, gpus, hours * HOUR, Side.KUBERNETES, "train_normal", priority_class)


def test_a_team_reclaims_its_guarantee_from_a_lower_priority_borrower() -> None:
    """Kueue on 8 GPUs: b (no guarantee) borrows all 8 with a dev job; at 1 h a's production job asks for 4 of the 4
    guaranteed to a, so b's job is requeued (checkpoints every 25 min: the 10 min since the one at 50 min are lost on
    8 GPUs) and waits until a's 2-h job ends at 3 h, then runs the 9 h 10 min left."""
    site = replace(small_site([], 8), guaranteed={("a", FLAVOR): 4, ("b", FLAVOR): 0},
                   class_priority={"inference": 10_000_000, "production": 1_000_000, "dev": 1000},
                   class_preempts={"inference": {"production", "dev"}, "production": {"dev"}, "dev": set()})
    workload = Workload([kube_job(0, "b", 0, 8, 10, "dev"), kube_job(1, "a", 1, 4, 2, "production")], [], 24 * HOUR,
                        1.0, 0.0)
    outcome = simulate(site, workload, Policy.STACK, Lending(), 1500, StaticSlices({}, {}, {}))
    borrower = next(r for r in outcome.runs if r.job.id == 0)
    assert waits_h(outcome) == {0: 0.0, 1: 0.0}
    assert borrower.lost_gpu_s == 600 * 8 and borrower.finished == 3 * HOUR + 36000 - 3000
    conserved(outcome)


def test_a_kubernetes_pass_tries_a_blocked_class_and_team_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """b's 8-GPU production job holds the flavor for 10 h while 400 1-GPU dev pods of a arrive, one a minute: each
    arrival's pass tries the preemption check for the first waiting pod, and skips the rest of a's dev pods, which
    would fail it the same way (before: every waiting pod at every event, 141,828 checks). They start from 10 h."""
    calls = 0
    check = Simulation._kueue_preempt_for

    def counted(self: Simulation, run: Run) -> bool:
        nonlocal calls
        calls += 1
        return check(self, run)

    monkeypatch.setattr(Simulation, "_kueue_preempt_for", counted)
    site = replace(small_site([], 8), quota={("a", FLAVOR): 8, ("b", FLAVOR): 8},
                   class_priority={"inference": 10_000_000, "production": 1_000_000, "dev": 1000},
                   class_preempts={"inference": {"production", "dev"}, "production": {"dev"}, "dev": set()})
    pods = [kube_job(i + 1, "a", 1 + i / 60, 1, 0.5, "dev") for i in range(400)]
    workload = Workload([kube_job(0, "b", 0, 8, 10, "production"), *pods], [], 24 * HOUR, 1.0, 0.0)
    outcome = simulate(site, workload, Policy.STACK, Lending(), 1800, StaticSlices({}, {}, {}))
    assert calls <= 2 * len(pods)
    assert min(r.first_start for r in outcome.runs if r.job.id > 0 and r.first_start is not None) == 10 * HOUR


def test_a_kubernetes_pass_stops_walking_a_class_and_team_blocked_at_one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Static: a's slice (8) is full for 10 h while 400 1-GPU dev pods of a arrive, one a minute. Once the first
    waiting pod finds no room, none of a's dev pods can start in that pass: each pass walks one of them, not every
    waiting one at every pass (a sum of 1 to 400)."""
    walked = 0
    until = engine._until

    def counted(runs: Iterable[Run], key: tuple[str, str], done: dict[tuple[str, str], bool] | None
                ) -> Iterator[Run]:
        nonlocal walked
        for run in until(runs, key, done):
            walked += 1
            yield run

    monkeypatch.setattr(engine, "_until", counted)
    pods = [kube_job(i + 1, "a", 1 + i / 60, 1, 0.5, "dev") for i in range(400)]
    workload = Workload([kube_job(0, "a", 0, 8, 10, "dev"), *pods], [], 24 * HOUR, 1.0, 0.0)
    outcome = simulate(small_site([], 8), workload, Policy.STATIC, Lending(), 1800,
                       StaticSlices({}, {("a", FLAVOR): 8, ("b", FLAVOR): 0}, {FLAVOR: 0}))
    assert walked <= 2 * len(pods) + 100
    assert min(r.first_start for r in outcome.runs if r.job.id > 0 and r.first_start is not None) == 10 * HOUR


def test_a_static_slurm_pass_walks_only_the_slices_whose_jobs_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Static, 4 GPUs each: b's 4-GPU job runs 10 h while 200 2-minute jobs of a come and go on a's slice, one every 3
    minutes. A job of a arriving or ending changes nothing in b's slice, so the passes walk b's queue only when b's
    own job starts and ends (before: at every one of a's 400 events). a's jobs still run as they did."""
    walked: dict[str | None, int] = {}
    easy = Simulation._easy

    def counted(self: Simulation, team: str | None, rank: Any) -> None:
        walked[team] = walked.get(team, 0) + 1
        easy(self, team, rank)

    monkeypatch.setattr(Simulation, "_easy", counted)
    jobs = [job(0, "b", 0, 4, 10), *(job(i + 1, "a", i / 20, 4, 1 / 30) for i in range(200))]
    outcome = simulate(small_site(ONE_NODE), Workload(jobs, [], 24 * HOUR, 1.0, 0.0), Policy.STATIC, Lending(), 1800,
                       StaticSlices({"a": 4, "b": 4}, {}, {}))
    assert walked["b"] <= 2 and walked["a"] >= 200
    assert all(r.first_start is not None for r in outcome.runs)
    conserved(outcome)


@dataclass
class Walk:
    """One width's walk in a Slurm pass."""

    length: int
    yielded: int = 0
    finished: bool = False
    """Whether it ran to its end: a pass that stops early leaves its walks unfinished, cut short by no block."""


def recorded_walks(monkeypatch: pytest.MonkeyPatch) -> list[Walk]:
    """Every width's walk of the Slurm passes from now on."""
    walks: list[Walk] = []
    narrower = engine._narrower

    def recorded(runs: list[Run], key: tuple[str, str], gpus: int, blocked: dict[tuple[str, str], int]
                 ) -> Iterator[Run]:
        walk = Walk(len(runs))
        walks.append(walk)
        for run in narrower(runs, key, gpus, blocked):
            walk.yielded += 1
            yield run
        walk.finished = True

    monkeypatch.setattr(engine, "_narrower", recorded)
    return walks


def test_a_slurm_pass_stops_walking_jobs_as_wide_as_a_blocked_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """a's two 4-GPU jobs fill the node, one for 10 h and one for 5 h, while 400 8-GPU jobs of a arrive from 1 h, one a
    minute (on the half minute), and two 2-GPU 1-h jobs at 2 h. At 5 h the first 8-GPU job waiting holds the
    reservation for 10 h; every later one finds 4 GPUs free, so none can start in that pass or any before 10 h: each
    pass walks at most one of them past it, not every waiting one at every pass (a sum of 1 to 400). The narrower jobs
    are still walked to the end, and both backfill at 5 h; the wide ones start from 10 h."""
    walks = recorded_walks(monkeypatch)
    wide = [job(i + 4, "a", 1 + (i + 0.5) / 60, 8, 0.5) for i in range(400)]
    narrow = [job(2, "a", 2, 2, 1), job(3, "a", 2, 2, 1)]
    workload = Workload([job(0, "a", 0, 4, 10), job(1, "a", 0, 4, 5), *narrow, *wide], [], 48 * HOUR, 1.0, 0.0)
    outcome = simulate(small_site(ONE_NODE), workload, Policy.STACK, Lending(), 1800, StaticSlices({}, {}, {}))
    assert sum(w.yielded for w in walks) <= 4 * len(wide)
    waits = waits_h(outcome)
    assert (waits[2], waits[3]) == (3.0, 3.0)
    assert min(r.first_start for r in outcome.runs if r.job.id > 3 and r.first_start is not None) == 10 * HOUR
    conserved(outcome)


@pytest.mark.parametrize("policy", list(Policy))
def test_a_slurm_pass_that_blocks_nothing_gives_the_same_figures(
        prod_site: Site, policy: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two days of Alibaba's pods on prod at training load 2 (two QoS, twelve teams, flex nodes that admit
    train_preemptible alone), simulated as it runs, blocked widths skipped, and with no job ever blocking another
    (every waiting job judged at every pass, as before the blocks): the same start, end and lost work for every job.
    Walks were cut short by a block (else the comparison would prove nothing)."""
    model = site_model(prod_site)
    workload = build(prod_site, model.teams, TRACES, Mapping(Trace.ALIBABA, days=2, training_load=2.0))
    walks = recorded_walks(monkeypatch)
    skipping = simulate(model, workload, policy, prod_site.lending, 1800, static_slices(model, prod_site))
    monkeypatch.setattr(Simulation, "_block", staticmethod(lambda blocked, run: None))
    judging_all = simulate(model, workload, policy, prod_site.lending, 1800, static_slices(model, prod_site))
    assert any(w.finished and w.yielded < w.length for w in walks)
    fast, full = ([(r.job.id, r.first_start, r.finished, r.lost_gpu_s) for r in o.runs]
                  for o in (skipping, judging_all))
    assert fast == full
    assert skipping.allocated_gpu_s == judging_all.allocated_gpu_s
