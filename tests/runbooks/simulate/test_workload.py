"""The trace-to-site mapping on the real traces: teams, scaling, classes, inference demand; and bad traces named."""

from pathlib import Path

import pytest

from components.site.site import Site
from runbooks.simulate.compare import at_stage, team_demand
from runbooks.simulate.site_model import site_model, static_slices
from runbooks.simulate.traces import Trace, TraceError, servegen_rates, training_jobs
from runbooks.simulate.workload import DAY_S, Mapping, Side, build
from tests.builders import parse, prod_values

TRACES = Path(__file__).resolve().parents[4] / "shared" / "traces"


@pytest.fixture(scope="module")
def prod_site() -> Site:
    return at_stage(parse(prod_values()), None)


def test_prod_site_model_comes_from_the_stack_planners(prod_site: Site) -> None:
    model = site_model(prod_site)
    assert [n.gpus for n in model.nodes] == [8] * 10  # 8 slurm-pool nodes, then the 2 flex nodes
    assert [n.name for n in model.nodes][-2:] == ["gpu-a800-09", "gpu-a800-10"]
    assert model.flavors == {"a800-kubernetes": ("A800-SXM4-80GB", 16), "rtx4090-kubernetes": ("RTX-4090", 32)}
    assert len(model.teams) == 12 and set(model.quota.values()) == {8}
    assert model.lending_preempts == {"train_preemptible"}  # inference requeues only this QoS on Slurm
    assert model.class_preempts["inference"] == {"production", "staging", "dev", "train_preemptible"}
    slices = static_slices(model, prod_site)
    assert slices.inference == {"a800-kubernetes": 16, "rtx4090-kubernetes": 24}  # 4 x 4 A800, 24 x 1 RTX 4090
    assert sum(slices.slurm.values()) == 80 and max(slices.slurm.values()) - min(slices.slurm.values()) == 1
    assert sum(slices.kubernetes.values()) == 8  # what inference leaves of the RTX 4090 flavor


def test_static_slices_by_demand_follow_each_teams_gpu_hours_and_leave_idle_teams_none(prod_site: Site) -> None:
    """StaticSplit.DEMAND: Slurm's 80 GPUs 3:1 between the two teams with Slurm work, the RTX 4090s teams may use (8)
    all to the one team with Kubernetes work; every other team owns nothing, unlike the fairshare split above."""
    model = site_model(prod_site)
    first, second, third = model.teams[:3]
    slices = static_slices(model, prod_site, {first: (3 * 3600, 0), second: (3600, 0), third: (0, 7200)})
    assert {t: g for t, g in slices.slurm.items() if g} == {first: 60, second: 20}
    assert {k: g for k, g in slices.kubernetes.items() if g} == {(third, "rtx4090-kubernetes"): 8}
    assert slices.inference == static_slices(model, prod_site).inference  # inference keeps its slice


def test_gavel_vcs_go_to_teams_in_turn_and_load_is_scaled(prod_site: Site) -> None:
    mapping = Mapping(Trace.GAVEL, days=10, training_load=0.5)
    workload = build(prod_site, site_model(prod_site).teams, TRACES, mapping)
    offered = sum(j.gpus * j.duration_s for j in workload.jobs)
    assert offered == pytest.approx(0.5 * 128 * 10 * DAY_S, rel=0.2)  # random thinning: near the target
    assert {j.team for j in workload.jobs} <= set(site_model(prod_site).teams)
    assert all(j.slurm_qos == "train_normal" and j.priority_class == "dev" for j in workload.jobs)
    assert all((j.side == Side.KUBERNETES) == (j.duration_s <= 3600) for j in workload.jobs)


def test_the_load_offered_is_the_load_asked_when_teams_take_only_some_groups(prod_site: Site) -> None:
    """One team takes one Philly VC: the trace is scaled on that VC's jobs, not on the VCs no team takes (which
    offered 7.7 % of the site instead of the 50 % asked), and the workload says what it offers."""
    mapping = Mapping(Trace.GAVEL, days=10, training_load=0.5, team_map={"speech": "2869ce"})
    workload = build(prod_site, site_model(prod_site).teams, TRACES, mapping)
    offered = sum(j.gpus * j.duration_s for j in workload.jobs) / (128 * 10 * DAY_S)
    assert workload.offered_load == pytest.approx(offered)
    assert offered == pytest.approx(0.5, rel=0.2)


def test_team_demand_sums_each_teams_gpu_seconds_by_side(prod_site: Site) -> None:
    workload = build(prod_site, site_model(prod_site).teams, TRACES, Mapping(Trace.GAVEL, days=5))
    demand = team_demand(workload)
    assert sum(s + k for s, k in demand.values()) == pytest.approx(sum(j.gpus * j.duration_s for j in workload.jobs))
    assert sum(k for _, k in demand.values()) == pytest.approx(
        sum(j.gpus * j.duration_s for j in workload.jobs if j.side == Side.KUBERNETES))


def test_team_map_routes_a_group_to_the_named_team(prod_site: Site) -> None:
    teams = site_model(prod_site).teams
    workload = build(prod_site, teams, TRACES, Mapping(Trace.GAVEL, days=5, team_map={"speech": "2869ce"}))
    assert workload.jobs and {j.team for j in workload.jobs} == {"speech"}
    with pytest.raises(TraceError, match=r"--team-map: speech=nope names no team of the site or no group"):
        build(prod_site, teams, TRACES, Mapping(Trace.GAVEL, days=5, team_map={"speech": "nope"}))


def test_alibaba_classes_map_to_the_table(prod_site: Site) -> None:
    workload = build(prod_site, site_model(prod_site).teams, TRACES, Mapping(Trace.ALIBABA, days=2))
    classes = {(j.slurm_qos, j.priority_class) for j in workload.jobs}
    # LS: the team default QoS and the highest team class; BE: the lowest of each; no class: the defaults.
    assert classes == {("train_normal", "production"), ("train_preemptible", "dev"), ("train_normal", "dev")}
    assert min(j.arrival_s for j in workload.jobs) >= 0


def test_inference_peak_asks_the_share_of_max_replicas(prod_site: Site) -> None:
    workload = build(prod_site, site_model(prod_site).teams, TRACES, Mapping(Trace.GAVEL, days=14,
                                                                               inference_peak=0.5))
    by_model = {d.model: d for d in workload.inference}
    qwen, llama = by_model["qwen2-5-72b"], by_model["llama-3-1-8b"]
    assert max(qwen.load) == pytest.approx(0.5 * 4) and max(llama.load) == pytest.approx(0.5 * 24)
    assert len(qwen.load) == 14 * 144  # ServeGen's 10-minute windows
    assert min(qwen.asked(s, True) for s in range(len(qwen.load))) == 1  # replicas.min holds at the series' gaps


def test_the_autoscaler_asks_past_replicas_max_only_where_nodes_are_lent(prod_site: Site) -> None:
    """At twice replicas.max's worth of load qwen needs 10 replicas (at most 5 waiting each): the stack's autoscaler
    asks 4 + 2 lent, the static world's 4, and neither hides the 10 needed."""
    workload = build(prod_site, site_model(prod_site).teams, TRACES, Mapping(Trace.GAVEL, days=1, inference_peak=2))
    qwen = next(d for d in workload.inference if d.model == "qwen2-5-72b")
    peak = qwen.load.index(max(qwen.load))
    assert (qwen.needed(peak), qwen.asked(peak, True), qwen.asked(peak, False)) == (10, 6, 4)


def test_a_malformed_trace_names_file_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "philly-gavel").mkdir()
    (tmp_path / "philly-gavel" / "jobs.csv").write_text(
        "vc,arrival_time_s,gang_size_gpus,duration_s_v100\nx,0,8,100\nx,5,eight,100\n")
    with pytest.raises(TraceError, match=r"jobs.csv:3: gang_size_gpus 'eight' is not a number"):
        training_jobs(tmp_path, Trace.GAVEL)
    with pytest.raises(TraceError, match=r"servegen_language_rate_10min.csv: unreadable"):
        servegen_rates(tmp_path)
