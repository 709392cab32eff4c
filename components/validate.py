"""Parse the site from Pulumi config, as the CLI hands it over: every value a string, objects as JSON.

One entry point, `parse_site`, for the engine (`__main__.py`) and the offline plan alike. It
reports every problem it finds, with its path and rule, and raises once.
"""

import functools
import json
from collections.abc import Collection, Mapping
from typing import Any

from components.facility.power import RULES as RACK_RULES
from components.facility.power import on_every_rack
from components.scheduling.kueue import check_inference_leaves_room
from components.scheduling.preemption import check_preemption
from components.site.problems import Problem, SiteSpecError
from components.site.rules import SPEC_RULES, Rule, rule
from components.site.sections import run_rules, validate_sections
from components.site.site import Site
from components.site.wellknown import (
    CEPH_NAMESPACE,
    DATABASE_OPERATOR_NAMESPACE,
    INFERENCE_NAMESPACE,
    KEDA_NAMESPACE,
    KUEUE_NAMESPACE,
    MONITORING_NAMESPACE,
    PLATFORM_ACCOUNT,
    STORAGE_NAMESPACE,
)
from components.slurm.conf import check_flex_qos
from components.teams.plan import check_team_quotas

KUBERNETES_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
SLURM_ACCOUNTS = ("root", PLATFORM_ACCOUNT)
"""Slurm's own account (its users hold every QoS, the operators-only ones included), and the operators' platform
account, which is also their account on the LLM gateway."""

SECRET_KEYS = ("ssh_private_key", "bmc_password", "llm_gateway_master_key", "munge_key")
"""Config keys that must be Pulumi secrets; they never enter the spec, only Pulumi outputs."""

_STRING_KEYS = {name for name, field in Site.model_fields.items() if field.annotation is str}


def parse_site(raw: Mapping[str, str], secret_keys: Collection[str]) -> Site:
    """raw: the project's config without its namespace (`racks`, not `gpu-cluster:racks`).

    secret_keys: the keys of raw that the CLI marked secret.
    The same input gives the same Site: `gpuctl plan` parses the stack, then runs the program on the same config,
    and both share one Site and every fact derived from it (components.site.derived).
    """
    return _parse(tuple(sorted(raw.items())), frozenset(secret_keys))


@functools.lru_cache(maxsize=4)
def _parse(items: tuple[tuple[str, str], ...], secret_keys: frozenset[str]) -> Site:
    raw = dict(items)
    problems = _check_secrets(raw, secret_keys)
    data: dict[str, Any] = {}
    unreadable = set()
    for key, value in raw.items():
        if key in SECRET_KEYS:
            continue
        if key not in Site.model_fields:
            known = ", ".join(sorted([*Site.model_fields, *SECRET_KEYS]))
            problems.append(Problem(key, f"unknown config key (known keys: {known})"))
            continue
        try:
            data[key] = value if key in _STRING_KEYS or not isinstance(value, str) else json.loads(value)
        except ValueError as err:  # not JSON, or a number of more digits than Python converts
            unreadable.add(key)
            why = f"{err.msg} at char {err.pos}" if isinstance(err, json.JSONDecodeError) else str(err).split(":")[0]
            problems.append(Problem(key, f"not valid JSON: {why}"))
    sections = validate_sections(data, unreadable)
    problems += sections.problems + run_rules(RULES, sections)
    if problems:
        raise SiteSpecError(problems)
    return sections.site


def _check_secrets(raw: Mapping[str, str], secret_keys: Collection[str]) -> list[Problem]:
    problems = []
    for key in SECRET_KEYS:
        if key not in raw:
            problems.append(Problem(key, f"required; set it with `pulumi config set --secret {key}`", "secrets"))
        elif key not in secret_keys:
            problems.append(Problem(
                key, f"must be a secret, not plain text; set it with `pulumi config set --secret {key}`", "secrets"
            ))
    return problems


def check_reserved_team_names(site: Site) -> list[Problem]:
    """A team's name becomes its namespace and its Slurm account: never one the cluster or the stack already has."""
    taken = {*KUBERNETES_NAMESPACES, MONITORING_NAMESPACE, STORAGE_NAMESPACE, CEPH_NAMESPACE, KUEUE_NAMESPACE,
             INFERENCE_NAMESPACE, KEDA_NAMESPACE, DATABASE_OPERATOR_NAMESPACE, site.gpu_operator.namespace,
             *SLURM_ACCOUNTS}
    return [Problem(f"teams[{i}].name", f"{team.name!r} is reserved: the cluster or the stack uses it for its own "
                                        "namespace or Slurm account")
            for i, team in enumerate(site.teams) if team.name in taken or team.name.startswith("kube-")]


RULES: tuple[Rule[Site], ...] = (
    *SPEC_RULES,
    rule("reserved-names", check_reserved_team_names, "teams", "gpu_operator"),
    rule("team-quotas", check_team_quotas, "teams", "node_groups", "gpu_catalog", "inference"),
    rule("inference-leaves-room", check_inference_leaves_room, "teams", "node_groups", "gpu_catalog", "inference"),
    rule("preemption", check_preemption, "scheduling"),
    rule("flex-qos", check_flex_qos, "slurm", "scheduling", "node_groups"),
    *(on_every_rack(r) for r in RACK_RULES),
)
