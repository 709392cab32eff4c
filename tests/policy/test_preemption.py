"""Preemption: PriorityClasses ordered production > staging > dev; no Slurm QoS preempts inference or critical."""

from typing import Any

import preemption
import pytest
from common import SLURM_TYPE
from pulumi_policy import PolicyResource
from pulumi_policy.proxy import UNKNOWN_NUMBER_VALUE

from tests.policy.builders import judge_stack, resource


def priority_class(name: str, value: Any) -> PolicyResource:
    return resource(preemption.PRIORITY_CLASS_TYPE, f"pc-{name}", {"metadata": {"name": name}, "value": value})


ORDERED = {"production": 1_000_000, "staging": 100_000, "dev": 1_000}


@pytest.mark.parametrize(("values", "expected"), [
    pytest.param(ORDERED, [], id="should admit production above staging above dev"),
    pytest.param({**ORDERED, "staging": 1_000_000}, ["PriorityClass production has value 1e+06, not above staging at "
                                                     "1e+06"], id="should deny staging level with production"),
    pytest.param({**ORDERED, "dev": 200_000}, ["PriorityClass staging has value 100000, not above dev at 200000"],
                 id="should deny dev above staging"),
    pytest.param({"production": 1_000_000, "staging": 100_000},
                 ["PriorityClasses production, staging exist without dev; define all of production > staging > dev"],
                 id="should deny a missing tier"),
    pytest.param({**ORDERED, "dev": UNKNOWN_NUMBER_VALUE},
                 ["PriorityClass pc-dev: value is unknown at preview; this policy fails closed"],
                 id="should deny a priority value unknown at preview"),
])
def test_priority_classes_ordered(values: dict[str, Any], expected: list[str]) -> None:
    classes = [priority_class(name, value) for name, value in values.items()]
    assert judge_stack(preemption.PRIORITY_CLASSES_ORDERED, *classes).messages == expected


def test_should_not_judge_a_stack_without_tiered_priority_classes() -> None:
    outcome = judge_stack(preemption.PRIORITY_CLASSES_ORDERED, priority_class("system-critical", 2_000_000_000))
    assert outcome.not_applicable == "no PriorityClass named production, staging, dev"


QOS = [{"name": "inference", "priority": 10_000, "preempt": ["train_preemptible"]},
       {"name": "train_normal", "priority": 1_000, "preempt": ["train_preemptible"]},
       {"name": "train_preemptible", "priority": 100, "preempt": []}]


@pytest.mark.parametrize(("qos", "config", "expected"), [
    pytest.param(QOS, None, [], id="should admit QoS that preempt only preemptible training"),
    pytest.param([*QOS, {"name": "urgent", "priority": 50_000, "preempt": ["inference", "critical"]}], None,
                 ["Slurm prod-slurm: QoS urgent preempts inference, urgent preempts critical; inference, critical "
                  "must never be preempted"], id="should deny a QoS that preempts inference or critical"),
    pytest.param(QOS, {"protected": ["train_preemptible"]},
                 ["Slurm prod-slurm: QoS inference preempts train_preemptible, train_normal preempts "
                  "train_preemptible; train_preemptible must never be preempted"],
                 id="should protect the QoS the config names"),
    pytest.param([{"name": "inference", "priority": 10}], None,
                 ["Slurm prod-slurm: qos entry {'name': 'inference', 'priority': 10} has no preempt list"],
                 id="should deny a QoS entry without a preempt list"),
])
def test_protected_qos_not_preempted(qos: list[dict[str, Any]], config: dict[str, Any] | None,
                                     expected: list[str]) -> None:
    slurm = resource(SLURM_TYPE, "prod-slurm", {"qos": qos})
    assert judge_stack(preemption.PROTECTED_QOS_NOT_PREEMPTED, slurm, config=config).messages == expected


def test_should_not_judge_qos_without_slurm() -> None:
    outcome = judge_stack(preemption.PROTECTED_QOS_NOT_PREEMPTED)
    assert outcome.not_applicable == f"no {SLURM_TYPE} component in the stack"
