"""The pack's names and thresholds, held to the program's: the pack imports nothing from the program at run time,
so each value it re-declares is pinned here to the one the program uses."""

import ast
import importlib
from typing import Any

import common
import cooling
import isolation
import observability
import preemption
import pytest
import teams
from pulumi_policy import Policy

from components import charts
from components.facility.power import RULES as RACK_RULES
from components.monitoring.dashboards import LLM_COST_UID, SIDECAR_LABEL
from components.scheduling.kueue import GPU_RESOURCE, TEAM_QUEUE
from components.site import defaults, wellknown
from components.site.catalog import GpuClass
from components.site.site import DEFAULT_CLASSES, CoolingType, Feed, Workload
from components.storage.tiers import nfs_storage_class, team_shares
from tests.builders import REPO, parse, prod_values, with_changes

# A team's StorageClass as the program renders it (the canary stage onboards the first teams).
TEAM_STORAGE_CLASS = nfs_storage_class(team_shares(parse(with_changes(prod_values(), stage="canary")))[0])

PINNED = [
    ("common.RACK_TYPE", common.RACK_TYPE, wellknown.RACK_TYPE),
    ("common.GPU_NODE_TYPE", common.GPU_NODE_TYPE, wellknown.GPU_NODE_TYPE),
    ("common.MONITORING_STACK_TYPE", common.MONITORING_STACK_TYPE, wellknown.MONITORING_TYPE),
    ("common.STORAGE_TIERS_TYPE", common.STORAGE_TIERS_TYPE, wellknown.STORAGE_TYPE),
    ("common.SLURM_TYPE", common.SLURM_TYPE, wellknown.SLURM_TYPE),
    ("common.TEAM_LABEL", common.TEAM_LABEL, wellknown.TEAM_LABEL),
    ("cooling.DENSE_CLASS", cooling.DENSE_CLASS, GpuClass.DENSE.value),
    ("cooling.DENSE_MIN_POWER_BUDGET_KW", cooling.DENSE_MIN_POWER_BUDGET_KW, defaults.DENSE_RACK_MIN_KW),
    ("cooling.DENSE_FORBIDDEN_COOLING", cooling.DENSE_FORBIDDEN_COOLING, CoolingType.AIR.value),
    ("teams.DEFAULT_QUEUE", teams.DEFAULT_QUEUE, TEAM_QUEUE),
    ("teams.GPU", teams.GPU, GPU_RESOURCE),
    ("cooling.FEEDS", cooling.FEEDS, tuple(feed.value for feed in Feed)),
    ("observability.HOT_RETENTION_DAYS", observability.HOT_RETENTION_DAYS, defaults.HOT_RETENTION_DAYS),
    ("observability.COLD_RETENTION_DAYS", observability.COLD_RETENTION_DAYS, defaults.COLD_RETENTION_DAYS),
    ("observability.GPU_IDLE_THRESHOLD_PCT", observability.GPU_IDLE_THRESHOLD_PCT, defaults.GPU_UTIL_LOW_PCT),
    ("observability.GPU_IDLE_WINDOW_HOURS", observability.GPU_IDLE_WINDOW_HOURS, defaults.GPU_UTIL_LOW_WINDOW_H),
    ("observability.GPU_TEMP_THRESHOLD_C", observability.GPU_TEMP_THRESHOLD_C, defaults.GPU_TEMP_INCIDENT_C),
    ("observability.COST_DASHBOARD", observability.COST_DASHBOARD, LLM_COST_UID),
    ("observability.DASHBOARD_LABEL", observability.DASHBOARD_LABEL, SIDECAR_LABEL),
    ("observability.GPU_OPERATOR_CHART", observability.GPU_OPERATOR_CHART, charts.GPU_OPERATOR.name),
    ("observability.PROMETHEUS_CHART", observability.PROMETHEUS_CHART, charts.KUBE_PROMETHEUS_STACK.name),
    ("observability.COLD_TIER_CHART", observability.COLD_TIER_CHART, charts.VICTORIA_METRICS_SINGLE.name),
    ("preemption.PRIORITY_TIERS", preemption.PRIORITY_TIERS,
     tuple(c.name for c in DEFAULT_CLASSES if c.workload == Workload.TRAINING and c.kubernetes_priority is not None)),
    ("preemption.PROTECTED_QOS", set(preemption.PROTECTED_QOS), {c.name for c in DEFAULT_CLASSES if not c.preemptible}),
    ("isolation.NFS_PROVISIONER", isolation.NFS_PROVISIONER, TEAM_STORAGE_CLASS["provisioner"]),
]

PACK_OWN = {
    # Type tokens the Kubernetes provider gives the objects the program registers, and a pattern over them.
    "isolation.NAMESPACE_TYPE", "isolation.STORAGE_CLASS_TYPE", "isolation.POLICY_TYPE", "isolation.BINDING_TYPE",
    "hygiene.HELM_RELEASE_TYPE", "observability.RELEASE_TYPE", "observability.PROMETHEUS_RULE_TYPE",
    "observability.CONFIGMAP_TYPE", "preemption.PRIORITY_CLASS_TYPE", "teams.NAMESPACE_TYPE", "teams.QUOTA_TYPE",
    "teams.LOCAL_QUEUE_TYPE", "teams.CLUSTER_QUEUE_TYPE", "wiring.NAMESPACE_TYPE", "wiring.SERVING_TYPES",
    "wiring.KUEUE_QUEUE",
    # The prefix the pinned facility type tokens share, and a name built from a pinned one.
    "common.FACILITY", "teams.GPU_REQUESTS",
    # Facts of Kubernetes, Helm and LiteLLM (their docs), and the charts' own defaults (their values.yaml).
    "teams.NAME_LABEL", "hygiene.EXACT_VERSION", "hygiene.OCI_PREFIX", "hygiene.ARCHIVE_SUFFIX",
    "hygiene.ENVIRONMENT_REFERENCE", "observability.CHART_DEFAULT_HOT_RETENTION",
    "observability.CHART_DEFAULT_COLD_RETENTION",
    # The pack's own judgement: what a secret's key ends with, and how it reads an alert's PromQL.
    "hygiene.SECRET_KEY_ENDINGS", "observability.IDLE_EXPR", "observability.HOT_EXPR",
    # The SDK's servicer and protobuf helpers the analyzer replaces or reads.
    "analyzer.SDK_SERVICER", "analyzer.PROTO", "analyzer.MESSAGE_TO_DICT",
    # Where the pack finds its modules.
    "pack.PACK_DIR",
}
"""The pack's constants that mirror nothing of the program, each with why."""


@pytest.mark.parametrize(("name", "pack", "program"), PINNED, ids=[p[0] for p in PINNED])
def test_should_hold_the_packs_value_to_the_programs(name: str, pack: Any, program: Any) -> None:
    assert pack == program, f"{name} is {pack!r} in the pack, {program!r} in the program"


def test_should_key_only_on_type_tokens_the_program_registers() -> None:
    tokens = {value for name, value in vars(common).items() if name.endswith("_TYPE") and isinstance(value, str)}
    registered = {value for name, value in vars(wellknown).items() if name.endswith("_TYPE")}
    assert tokens <= registered


def declared_constants() -> set[str]:
    """`module.NAME` of every public upper-case name a pack module assigns, its policies and their list aside."""
    names = set()
    for path in sorted((REPO / "policy").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            names |= {f"{path.stem}.{t.id}" for t in targets if isinstance(t, ast.Name) and t.id.isupper()
                      and not t.id.startswith("_") and t.id != "POLICIES"}
    return {name for name in names if not isinstance(value_of(name), Policy)}


def value_of(name: str) -> Any:
    module, attribute = name.split(".")
    return getattr(importlib.import_module(module), attribute)


def test_should_pin_or_explain_every_constant_the_pack_declares() -> None:
    # A value the pack re-declares from the program and this file does not pin would drift unseen.
    assert declared_constants() - PACK_OWN == {name for name, _, _ in PINNED}


def test_should_name_each_rack_rule_as_the_pack_names_the_policy_that_judges_it() -> None:
    assert {r.id for r in RACK_RULES} <= {policy.name for policy in cooling.POLICIES}
