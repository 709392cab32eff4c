"""The one preemption table: what each scheduler gets from it, and the consistency check (exact messages)."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.scheduling.preemption import check_preemption, priority_class_manifest, priority_classes, slurm_qos
from components.site.site import Scheduling, SchedulingClass, Workload
from tests.builders import parse, problems, prod_values, scheduling_with, with_changes


def test_should_rank_production_over_staging_over_dev_under_inference(prod: dict[str, Any]) -> None:
    classes = priority_classes(parse(prod))
    assert [(pc.name, pc.value, pc.preemption_policy, pc.global_default) for pc in classes] == [
        ("inference", 10_000_000, "PreemptLowerPriority", False),
        ("production", 1_000_000, "PreemptLowerPriority", False),
        ("staging", 100_000, "PreemptLowerPriority", False),
        ("dev", 1_000, "Never", True),
    ]


def test_should_make_only_the_lowest_class_the_global_default(prod: dict[str, Any]) -> None:
    manifests = [priority_class_manifest(pc) for pc in priority_classes(parse(prod))]
    assert [m["metadata"]["name"] for m in manifests if m["globalDefault"]] == ["dev"]


def test_should_order_slurm_qos_preemptible_normal_high_with_inference_and_critical_protected(
        prod: dict[str, Any]) -> None:
    qos = slurm_qos(parse(prod))
    assert [(q.name, q.priority) for q in qos] == [("critical", 100_000), ("inference", 50_000),
                                                   ("train_high", 10_000), ("train_normal", 1_000),
                                                   ("train_preemptible", 100)]
    assert all(victim not in ("inference", "critical") for q in qos for victim in q.preempts)


P = "scheduling.classes"


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        pytest.param({"train_high": {"preempts": ["inference"]}},
                     [f"{P}[4].preempts: train_high cannot preempt inference, listed above it",
                      f"{P}[4].preempts: inference is never preemptible",
                      f"{P}[4].preempts: training class train_high must not preempt inference class inference"],
                     id="rejects training preempting inference on Slurm"),
        pytest.param({"inference": {"kubernetes_priority": 500}, "dev": {"preempts": []}},
                     [f"{P}[2].kubernetes_priority: production at 1000000 is not below inference at 500, listed "
                      "above it; list classes highest first"],
                     id="rejects a Kubernetes order that disagrees with the table"),
        pytest.param({"train_normal": {"slurm_priority": 20_000}},
                     [f"{P}[5].slurm_priority: train_normal at 20000 is not below train_high at 10000, listed above "
                      "it; list classes highest first"],
                     id="rejects a Slurm order that disagrees with the table"),
        pytest.param({"production": {"preempts": ["dev"]}},
                     [f"{P}[2].preempts: production must list staging: on Kubernetes it preempts every lower class "
                      "(kube-scheduler and Kueue preempt by value)"],
                     id="rejects a Kubernetes class that claims not to preempt a lower one"),
        pytest.param({"critical": {"preempts": ["dev"]}},
                     [f"{P}[0].preempts: critical and dev share no scheduler, so neither can preempt the other"],
                     id="rejects preempting a class on the other scheduler only"),
        pytest.param({"train_high": {"preempts": ["ghost"]}},
                     [f'{P}[4].preempts: no class named "ghost" (known: critical, inference, production, staging, '
                      "train_high, train_normal, dev, train_preemptible)"],
                     id="rejects preempting an unknown class"),
        pytest.param({"train_low": {"workload": "training", "kubernetes_priority": 10}},
                     [f'{P}[8].name: "train_low" cannot name a PriorityClass (no "_" in Kubernetes names); drop '
                      "kubernetes_priority or rename it"],
                     id="rejects a Kubernetes class named like a QoS"),
        pytest.param({"idle": {"workload": "training"}},
                     [f"{P}[8]: idle has neither kubernetes_priority nor slurm_priority"],
                     id="rejects a class on no scheduler"),
    ],
)
def test_should_deny_an_inconsistent_table(prod: dict[str, Any], rows: dict[str, Any], expected: list[str]) -> None:
    assert problems(with_changes(prod, scheduling=scheduling_with(**rows))) == expected


def test_should_deny_a_training_class_ranked_above_inference_on_kubernetes(prod: dict[str, Any]) -> None:
    batch = {"name": "batch", "workload": "training", "kubernetes_priority": 20_000_000,
             "preempts": ["inference", "production", "staging", "dev"]}
    table = [batch, *scheduling_with()["classes"]]
    assert problems(with_changes(prod, scheduling={"classes": table})) == [
        f"{P}[0].preempts: inference is never preemptible",
        f"{P}[0].preempts: training class batch must not preempt inference class inference",
    ]


def test_should_deny_a_team_default_closed_to_teams(prod: dict[str, Any]) -> None:
    assert problems(with_changes(prod, scheduling={"team_default_class": "critical"})) == [
        'scheduling.team_default_class: no Slurm class open to teams is named "critical" (open to teams: '
        "train_high, train_normal, train_preemptible)"]


# --- property: whatever table passes the check is one strict total order that both schedulers agree on ----------

NAMES = ["a", "b", "c", "d", "e", "f"]


@st.composite
def tables(draw: st.DrawFn) -> list[SchedulingClass]:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True))
    rows = []
    for name in names:
        rows.append(SchedulingClass(
            name=name,
            workload=draw(st.sampled_from(list(Workload))),
            kubernetes_priority=draw(st.none() | st.integers(1, 50)),
            slurm_priority=draw(st.none() | st.integers(0, 50)),
            preempts=draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names))),
            preemptible=draw(st.booleans()),
        ))
    return rows


def site_with(prod: dict[str, Any], table: list[SchedulingClass]) -> Any:
    site = parse(prod)
    scheduling = Scheduling(classes=table, team_default_class=table[0].name)
    return site.model_copy(update={"scheduling": scheduling})


def preempted_on_kubernetes(table: list[SchedulingClass], i: int) -> set[str]:
    """What class i really preempts on Kubernetes: every lower-valued class (kube-scheduler and Kueue)."""
    value = table[i].kubernetes_priority
    if value is None:
        return set()
    return {c.name for c in table if c.kubernetes_priority is not None and c.kubernetes_priority < value}


@pytest.mark.expected_s(36)
@settings(max_examples=400, deadline=None)
@given(table=tables())
def test_should_accept_only_one_strict_order_both_schedulers_agree_on(table: list[SchedulingClass]) -> None:
    found = [p for p in check_preemption(site_with(prod_values(), table)) if p.path != "scheduling.team_default_class"]
    if found:
        return
    for side in ("kubernetes_priority", "slurm_priority"):
        ranked = [(i, getattr(c, side)) for i, c in enumerate(table) if getattr(c, side) is not None]
        values = [v for _, v in ranked]
        # Strict (no ties) and total, and the same order as the table, so both sides order shared rows alike.
        assert values == sorted(values, reverse=True) and len(set(values)) == len(values)
    for i, c in enumerate(table):
        slurm_victims = {p for p in c.preempts if table[[r.name for r in table].index(p)].slurm_priority is not None}
        victims = preempted_on_kubernetes(table, i) | (slurm_victims if c.slurm_priority is not None else set())
        for victim in (r for r in table if r.name in victims):
            assert victim.preemptible
            assert not (c.workload == Workload.TRAINING and victim.workload == Workload.INFERENCE)


def test_should_accept_the_default_table(prod: dict[str, Any]) -> None:
    assert check_preemption(parse(prod)) == []
