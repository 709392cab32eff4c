"""Every spec rule has a failing example whose exact message is asserted; the prod site passes."""

from typing import Any

import pytest

from components.site.problems import SiteSpecError
from components.site.site import Site
from components.validate import SECRET_KEYS, parse_site
from tests.builders import encode, parse, problems, scheduling_with, with_changes

A800 = "A800-SXM4-80GB"


def test_should_accept_the_prod_site(prod: dict[str, Any]) -> None:
    site = parse(prod)
    assert sum(g.gpus_per_node * len(g.nodes) for g in site.node_groups) == 128
    assert sum(len(g.nodes) for g in site.node_groups) == 16
    # The first stage, deployed by the first `pulumi up`, onboards no team; the canary its two.
    assert site.stage == site.stages[0].name == "platform" and site.teams_onboarded() == []
    canary = parse(with_changes(prod, stage="canary"))
    assert [t.name for t in canary.teams_onboarded()] == ["nlp-foundation", "speech"]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param(
            {"colour": "red"},
            [f"colour: unknown config key (known keys: {', '.join(sorted([*Site.model_fields, *SECRET_KEYS]))})"],
            id="rejects an unknown config key",
        ),
        pytest.param({"racks__0__colour": "red"}, ["racks[0].colour: unknown key"], id="rejects an unknown nested key"),
        pytest.param(
            {"racks__0__power_budget_kw": "lots"},
            ["racks[0].power_budget_kw: Input should be a valid number, unable to parse string as a number "
             '(got "lots")'],
            id="rejects a wrong type",
        ),
        pytest.param(
            {"racks__0__power_budget_kw": -5},
            ["racks[0].power_budget_kw: Input should be greater than 0 (got -5)"],
            id="rejects a negative budget",
        ),
        pytest.param(
            {"racks__1__room": "hall-z"},
            ['racks[1].room: no room named "hall-z" (known: hall-a, hall-b)'],
            id="rejects a rack in an unknown room",
        ),
        pytest.param(
            {"node_groups__0__nodes__0__rack": "z99"},
            ['node_groups[0].nodes[0].rack: no rack named "z99" (known: a01, a02, a03, b01)'],
            id="rejects a node in an unknown rack",
        ),
        pytest.param(
            {"node_groups__0__gpu_model": "A900"},
            ['node_groups[0].gpu_model: no gpu_catalog entry named "A900" (known: A100-SXM4-80GB, A800-SXM4-80GB, '
             'H100-SXM5-80GB, L40S, RTX-4090)'],
            id="rejects an unknown GPU model",
        ),
        pytest.param(
            {"teams__0__stage": "beta"},
            ['teams[0].stage: no stage named "beta" (known: platform, canary, half, full)'],
            id="rejects a team in an unknown stage",
        ),
        pytest.param(
            {"stage": "beta"}, ['stage: no stage named "beta" (known: platform, canary, half, full)'],
            id="rejects an unknown current stage",
        ),
        pytest.param(
            {"teams__1__name": "nlp-foundation"},
            ['teams[1].name: "nlp-foundation" is already used by teams[0]'],
            id="rejects a team listed twice",
        ),
        pytest.param(
            {"teams__2__name": "nlp-foundation"},
            ['teams[2].stage: team "nlp-foundation" is already onboarded by stage canary (teams[0]); a team joins '
             "in one stage only"],
            id="rejects a team in two stages",
        ),
        pytest.param(
            {"stage": "Canary"},
            ["stage: String should match pattern '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$' (got \"Canary\")"],
            id="rejects a stage name that is not a DNS label",
        ),
        pytest.param(
            {"teams__0__gpu_quota": {"A800-SXM4-80GB": 8}},
            ['teams[0].gpu_quota.A800-SXM4-80GB: no Kueue GPU flavor named "A800-SXM4-80GB" '
             "(known: a800-kubernetes, rtx4090-kubernetes)"],
            id="rejects a quota that names a GPU model, not a flavor",
        ),
        pytest.param(
            {"teams__0__gpu_quota": {"rtx4090-kubernetes": 40}},
            ["teams[0].gpu_quota.rtx4090-kubernetes: 40 GPUs exceed the 8 GPUs of flavor rtx4090-kubernetes left by "
             "the model servers' 24 (inference.models[].replicas.max x gpus_per_replica)"],
            id="rejects a quota above the flavor's GPUs",
        ),
        pytest.param(
            {"teams__0__gpu_quota": {"rtx4090-kubernetes": 16}},
            ["teams[0].gpu_quota.rtx4090-kubernetes: 16 GPUs exceed the 8 GPUs of flavor rtx4090-kubernetes left by "
             "the model servers' 24 (inference.models[].replicas.max x gpus_per_replica)"],
            id="rejects a quota on GPUs the model servers may hold",
        ),
        pytest.param(
            {"inference__models__1__replicas": {"min": 2, "max": 32}},
            ["inference.models: the model servers may hold 16 of a800-kubernetes's 16, 32 of rtx4090-kubernetes's 32 "
             "GPUs (replicas.max x gpus_per_replica: inference.models[0] qwen2-5-72b: 4 x 4; inference.models[1] "
             "llama-3-1-8b: 32 x 1): no kubernetes-pool GPU is left for the teams' Kueue queues"],
            id="rejects model servers that may hold the whole kubernetes pool",
        ),
        pytest.param(
            {"teams__0__gpu_guaranteed": {"a800-flex": 2}},
            ["teams[0].gpu_guaranteed.a800-flex: a800-flex GPUs are Slurm's until lent to inference (gpuctl flex); "
             "teams get quota on kubernetes-pool flavors only"],
            id="rejects a guarantee on the flex pool",
        ),
        pytest.param(
            {"teams__0__gpu_quota": {"a800-flex": 8}},
            ["teams[0].gpu_quota.a800-flex: a800-flex GPUs are Slurm's until lent to inference (gpuctl flex); "
             "teams get quota on kubernetes-pool flavors only"],
            id="rejects a quota on the flex pool",
        ),
        pytest.param(
            {"teams__0__gpu_guaranteed": {"a800-kubernetes": 9}},
            ["teams[0].gpu_guaranteed.a800-kubernetes: 9 guaranteed GPUs exceed the team's quota of 8 on "
             "a800-kubernetes"],
            id="rejects a guarantee above the team's quota",
        ),
        pytest.param(
            {"teams__0__gpu_guaranteed": {"h100-kubernetes": 1}},
            ['teams[0].gpu_guaranteed.h100-kubernetes: no Kueue GPU flavor named "h100-kubernetes" '
             "(known: a800-kubernetes, rtx4090-kubernetes)"],
            id="rejects a guarantee on an unknown flavor",
        ),
        pytest.param(
            # Guarantees are summed over every team in the spec, onboarded or not, so the last stage fits too.
            {**{f"teams__{i}__gpu_guaranteed": {"a800-kubernetes": 6} for i in (0, 5, 11)},
             "inference__models__0__replicas": {"min": 1, "max": 1}},
            ["teams[11].gpu_guaranteed.a800-kubernetes: with this team the guarantees on a800-kubernetes add up to "
             "18 GPUs, more than the 12 of flavor a800-kubernetes left by the model servers' 4 "
             "(inference.models[].replicas.max x gpus_per_replica)"],
            id="rejects guarantees that add up to more than the flavor",
        ),
        pytest.param(
            {"node_groups__3__nodes__0__name": "gpu-a800-01"},
            ['node_groups[3].nodes[0].name: "gpu-a800-01" is already used by node_groups[0].nodes[0]'],
            id="rejects a node name used in two groups",
        ),
        pytest.param(
            {"racks__0__pdus__1__name": "a01-pdu-a"},
            ['racks[0].pdus[1].name: "a01-pdu-a" is already used by racks[0].pdus[0]'],
            id="rejects a PDU name used twice in a rack",
        ),
        pytest.param(
            {"teams__2__stage": "canary"},
            ["stages[1].max_teams: 3 teams are onboarded by canary (nlp-foundation, speech, vision), "
             "more than its limit of 2"],
            id="rejects a canary of more than two teams",
        ),
        pytest.param(
            {"teams__1__stage": "platform"},
            ['teams[1].stage: team "speech" is onboarded by platform, the first stage, which the first `pulumi up` '
             "deploys before any acceptance campaign or approval: the first stage onboards no team; name a later "
             "one"],
            id="rejects a team onboarded by the first stage",
        ),
        pytest.param(
            {"stages": [{"name": "pilot", "min_soak_days": 7}, {"name": "all", "min_soak_days": 0}],
             "stage": "pilot", **{f"teams__{i}__stage": "all" for i in range(1, 12)}, "teams__0__stage": "pilot"},
            ['teams[0].stage: team "nlp-foundation" is onboarded by pilot, the first stage, which the first `pulumi '
             'up` deploys before any acceptance campaign or approval: the first stage onboards no team; name a later '
             "one"],
            id="rejects a team onboarded by the first stage whatever its name",
        ),
        pytest.param(
            {"teams__3__name": "platform"},
            ["teams[3].name: 'platform' is reserved: the cluster or the stack uses it for its own namespace or Slurm "
             "account"],
            id="rejects a team named as the platform account",
        ),
        pytest.param(
            {"scheduling": scheduling_with(production={"kubernetes_priority": 10})},
            ["scheduling.classes[3].kubernetes_priority: staging at 100000 is not below production at 10, listed "
             "above it; list classes highest first"],
            id="rejects priorities out of order",
        ),
        pytest.param(
            {"monitoring": {"hot_retention_days": 30, "cold_retention_days": 30}},
            ["monitoring.cold_retention_days: the cold tier (30 days) must outlast the hot tier (30 days)"],
            id="rejects a cold tier no longer than the hot tier",
        ),
        pytest.param(
            {"node_groups__0__nodes__4__rack": "a01", "node_groups__0__nodes__5__rack": "a01"},
            [f"racks[0].power_budget_kw: planned draw 38.9 kW of 6 x {A800} nodes exceeds budget 40 kW less 20 % "
             "headroom (32.0 kW usable)",
             "racks[0].pdus: feed A alone carries 33.2 kW at 80 % continuous derating, less than the rack's 38.9 kW",
             "racks[0].pdus: feed B alone carries 33.2 kW at 80 % continuous derating, less than the rack's 38.9 kW"],
            id="rejects a rack over its power budget and its feeds",
        ),
        pytest.param(
            {"racks__3__cooling__capacity_kw": 15},
            ["racks[3].cooling.capacity_kw: 15 kW cannot remove 20.4 kW of heat from 4 x RTX-4090 nodes"],
            id="rejects cooling below the heat load",
        ),
        pytest.param(
            {"racks__3__cooling": {"type": "air", "capacity_kw": 30}},
            ["racks[3].cooling.capacity_kw: air cooling removes at most 15 kW per rack, not 30 kW"],
            id="rejects more capacity than the cooling type can remove",
        ),
        pytest.param(
            {"racks__0__power_budget_kw": 15, "racks__0__cooling": {"type": "air", "capacity_kw": 15}},
            [f"racks[0].power_budget_kw: planned draw 26.0 kW of 4 x {A800} nodes exceeds budget 15 kW less 20 % "
             "headroom (12.0 kW usable)",
             f"racks[0].cooling.capacity_kw: 15 kW cannot remove 26.0 kW of heat from 4 x {A800} nodes",
             f"racks[0].power_budget_kw: dense GPUs ({A800}) need a rack of at least 40 kW, not 15 kW",
             f"racks[0].cooling.type: dense GPUs ({A800}) never go in an air-cooled rack; use in-row chilled water, "
             "direct liquid or immersion"],
            id="rejects A800 in a legacy air-cooled rack",
        ),
        pytest.param(
            {"racks__0__pdus": [{"name": "a01-pdu-a", "feed": "A", "voltage_v": 380, "current_a": 63, "phases": 3}]},
            ["racks[0].pdus: no PDU on feed B; every rack needs dual-path power (feeds A and B)"],
            id="rejects a rack on a single feed",
        ),
        pytest.param(
            {"racks__0__pdus__1__current_a": 32},
            ["racks[0].pdus: feed B alone carries 16.8 kW at 80 % continuous derating, less than the rack's 26.0 kW"],
            id="rejects a feed that cannot carry the rack alone",
        ),
        pytest.param(
            {"racks__1__pdus__0__current_a": 40, "racks__1__pdus__1__phases": 2},
            ["racks[1].pdus[0].current_a: 40 A is not a site socket rating (32 or 63 A)",
             "racks[1].pdus[1].phases: 2 phases: must be 1 or 3",
             "racks[1].pdus: feed A alone carries 21.1 kW at 80 % continuous derating, less than the rack's 26.0 kW",
             "racks[1].pdus: feed B alone carries 19.2 kW at 80 % continuous derating, less than the rack's 26.0 kW"],
            id="rejects odd PDU ratings and phases",
        ),
        pytest.param(
            {"slurm__slurmd_timeout_s": 1800},
            ["acceptance.drills[0].detect_within_s: 1500 s (scaled) is shorter than slurm.slurmd_timeout_s 1800 s: "
             "Slurm cannot mark the failed node down by then"],
            id="rejects a node-failure drill that ends before Slurm can see the node dead",
        ),
        pytest.param(
            {"acceptance": {"peak_window_days": 31}},
            ["acceptance.peak_window_days: 31 days of history to measure the peak over, but the hot tier keeps "
             "monitoring.hot_retention_days 30: the peak window must lie within hot retention, or the campaign reads "
             "days Prometheus no longer holds"],
            id="rejects a peak window longer than hot retention",
        ),
        pytest.param(
            {"monitoring": {"hot_retention_days": 10, "cold_retention_days": 365}},
            ["acceptance.peak_window_days: 14 days of history to measure the peak over, but the hot tier keeps "
             "monitoring.hot_retention_days 10: the peak window must lie within hot retention, or the campaign reads "
             "days Prometheus no longer holds"],
            id="rejects a hot retention shorter than the default peak window",
        ),
        pytest.param(
            {"lending__lend_waiting_per_replica": 5},
            [f"lending.lend_waiting_per_replica: 5 is not above the 5 waiting per replica at which the autoscaler adds "
             f"a replica of inference.models[{i}] {name}: the controller would lend Slurm's nodes for queues the "
             "kubernetes pool can still absorb by scaling" for i, name in enumerate(["qwen2-5-72b", "llama-3-1-8b"])],
            id="rejects a lend threshold at the autoscaler's",
        ),
        pytest.param(
            {"inference__models__1__waiting_per_replica": 12},
            ["lending.lend_waiting_per_replica: 10 is not above the 12 waiting per replica at which the autoscaler "
             "adds a replica of inference.models[1] llama-3-1-8b: the controller would lend Slurm's nodes for queues "
             "the kubernetes pool can still absorb by scaling"],
            id="rejects a model whose autoscaler waits for more than the lend threshold",
        ),
    ],
)
def test_should_deny(prod: dict[str, Any], changes: dict[str, Any], expected: list[str]) -> None:
    assert problems(with_changes(prod, **changes)) == expected


def test_should_accept_a_peak_window_past_hot_retention_when_the_peak_is_declared(prod: dict[str, Any]) -> None:
    # The declared peak reads no history, so its window asks nothing of the hot tier.
    site = parse(with_changes(prod, acceptance={"peak_window_days": 31, "peak_source": "declared"}))
    assert site.acceptance.peak_window_days > site.monitoring.hot_retention_days


def test_should_report_a_missing_key_with_its_path(prod: dict[str, Any]) -> None:
    del prod["racks"][0]["room"]
    assert problems(prod) == ["racks[0].room: required key is missing"]


def test_should_deny_missing_and_plain_text_secrets(prod: dict[str, Any]) -> None:
    raw = encode(prod) | {"bmc_password": "hunter2"}
    with pytest.raises(SiteSpecError) as caught:
        parse_site(raw, secret_keys=set())
    assert [str(p) for p in caught.value.problems] == [
        "ssh_private_key: required; set it with `pulumi config set --secret ssh_private_key`",
        "bmc_password: must be a secret, not plain text; set it with `pulumi config set --secret bmc_password`",
        "llm_gateway_master_key: required; set it with `pulumi config set --secret llm_gateway_master_key`",
        "munge_key: required; set it with `pulumi config set --secret munge_key`",
    ]
    assert "hunter2" not in str(caught.value)


def test_should_report_unreadable_json_once(prod: dict[str, Any]) -> None:
    raw = encode(prod) | {"racks": "[{oops"} | {key: "k" for key in SECRET_KEYS}
    with pytest.raises(SiteSpecError) as caught:
        parse_site(raw, set(SECRET_KEYS))
    assert [str(p) for p in caught.value.problems] == [
        "racks: not valid JSON: Expecting property name enclosed in double quotes at char 2"
    ]


def test_should_report_every_problem_at_once(prod: dict[str, Any]) -> None:
    found = problems(with_changes(prod, stage="beta", racks__1__room="hall-z", racks__3__cooling__capacity_kw=15),
                     secrets=("ssh_private_key", "llm_gateway_master_key", "munge_key"))
    assert found == [
        "bmc_password: required; set it with `pulumi config set --secret bmc_password`",
        'racks[1].room: no room named "hall-z" (known: hall-a, hall-b)',
        'stage: no stage named "beta" (known: platform, canary, half, full)',
        "racks[3].cooling.capacity_kw: 15 kW cannot remove 20.4 kW of heat from 4 x RTX-4090 nodes",
    ]


def test_should_let_the_site_override_the_gpu_catalog(prod: dict[str, Any]) -> None:
    measured = {"tdp_w": 300, "memory_gb": 80, "gpu_class": "dense", "source": "site measurement",
                "smi_name": "NVIDIA A800-SXM4-80GB", "nvlinks": 8}
    changed = with_changes(prod, gpu_catalog={A800: measured})
    site = parse(changed)
    assert site.gpu_catalog[A800].tdp_w == 300
    assert "RTX-4090" in site.gpu_catalog


def test_should_accept_a_gateway_budget_for_the_platform_account_but_no_other_non_team(prod: dict[str, Any]) -> None:
    # What the acceptance campaign's inference load may spend: the platform account is no team, but has a budget.
    assert parse(with_changes(prod, inference__gateway__team_budgets={"platform": 20000})).inference.gateway.budget_of(
        "platform") == 20000
    assert problems(with_changes(prod, inference__gateway__team_budgets={"ops": 1})) == [
        'inference.gateway.team_budgets: no team named "ops" (known: nlp-foundation, speech, vision, multimodal, rl, '
        "code-llm, safety, recsys, bio-ai, robotics, agents, eval, platform)"]
