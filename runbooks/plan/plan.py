"""The offline plan: validate the site, render the stack under the offline engine, judge it, summarize it.

Every figure in the summary is read from what the program registered (the components' outputs),
not recomputed from the spec, so the plan shows what the engine and the policy pack will see.
"""

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.site.site import Site
from components.site.wellknown import (
    CLUSTER_TYPE,
    GPU_NODE_TYPE,
    INFERENCE_TYPE,
    RACK_TYPE,
    SCHEDULING_TYPE,
    SLURM_TYPE,
    STORAGE_TYPE,
    TEAM_TYPE,
)
from components.slurm.install import installed_files
from components.validate import parse_site
from runbooks.offline.engine import STACK_TYPE, Resource, ResourceGraph, load_stack_config, project_name, run_program
from runbooks.offline.policy_pack import Finding, PolicyPack, PolicyResult, check_policies
from runbooks.plan.files import is_kubernetes_object, manifest

Progress = Callable[[str], None]


@dataclass
class GroupRow:
    node_group: str
    pool: str
    gpu_model: str
    nodes: int = 0
    gpus: int = 0


@dataclass
class RackRow:
    rack: str
    room: str
    nodes: int
    gpus: int
    it_load_kw: float
    usable_kw: float
    heat_load_kw: float
    cooling_type: str
    cooling_capacity_kw: float
    feed_capacity_kw: dict[str, float]
    failed_checks: list[str]

    @property
    def power_headroom_kw(self) -> float:
        return self.usable_kw - self.it_load_kw

    @property
    def cooling_headroom_kw(self) -> float:
        return self.cooling_capacity_kw - self.heat_load_kw


@dataclass
class TeamRow:
    team: str
    stage: str
    """The stage that onboarded the team."""
    gpu_quota: dict[str, int]
    """Most GPUs per Kueue flavor the team's jobs may hold on Kubernetes."""
    gpu_guaranteed: dict[str, int]
    """GPUs per flavor set aside for the team (part of gpu_quota)."""
    local_queue: str
    storage_class: str
    slurm_default_qos: str
    slurm_qos: list[str]
    fairshare: int

    @property
    def gpu_total(self) -> int:
        return sum(self.gpu_quota.values())


@dataclass
class Summary:
    stack: str
    stage: str
    teams_onboarded: list[str]
    teams_total: int
    groups: list[GroupRow]
    racks: list[RackRow]
    resources_by_type: dict[str, int]
    storage: dict[str, Any]
    """The storage tiers' outputs: StorageClasses, sizes, the mover's schedule."""
    teams: list[TeamRow]
    """The onboarded teams, in spec order, as their Team components registered them."""
    scheduling: dict[str, Any]
    """The Scheduling component's outputs: PriorityClasses, Kueue flavors and queues."""
    slurm_qos: list[dict[str, Any]]
    """The Slurm QoS the Slurm component reports, from the same table."""
    inference: dict[str, Any]
    """The inference path's outputs: the models behind the gateway, their prices, the teams' budgets."""
    policies: list[PolicyResult]
    files: list[Path] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        return sum(g.gpus for g in self.groups)

    @property
    def nodes(self) -> int:
        return sum(g.nodes for g in self.groups)


@dataclass
class Plan:
    site: Site
    graph: ResourceGraph
    policies: list[PolicyResult]
    policy_seconds: float
    """Wall time of judging: the pack's start where judge() started it (policy_pack() starts it before the program),
    Analyze per resource, AnalyzeStack."""

    @property
    def blocking(self) -> list[Finding]:
        """Violations of mandatory policies: what would stop `pulumi preview --policy-pack policy`."""
        return [v for r in self.policies for v in r.violations if v.enforcement_level == "mandatory"]


def run(project_dir: Path, stack: str, progress: Progress = lambda _: None,
        watch: Callable[[Site], Callable[[Resource], None] | None] = lambda _: None) -> tuple[Site, ResourceGraph]:
    """The site and what the program registers for it; watch(site), where it gives one, is called with each resource
    as the program registers it. Raises StackConfigError or SiteSpecError before anything is registered."""
    progress(f"reading Pulumi.yaml and Pulumi.{stack}.yaml")
    config = load_stack_config(project_dir, stack)
    progress("validating the site spec")
    site = parse_site(*config.project_values())
    progress("running the program under the offline engine")
    return site, run_program(project_dir, stack, config, watch(site))


def policy_pack(project_dir: Path, stack: str) -> PolicyPack:
    """The project's policy pack, started now for the stack, to judge() what the program will register: it loads
    while the program runs. Raises StackConfigError where Pulumi.yaml names no project."""
    return PolicyPack(project_dir / "policy", project_name(project_dir), stack)


def judge(site: Site, graph: ResourceGraph, project_dir: Path, policy_config: dict[str, Any] | None = None,
          progress: Progress = lambda _: None, pack: PolicyPack | None = None) -> Plan:
    """What the program registered, judged by the policy pack (pack, where policy_pack() started it)."""
    progress("judging the resources with the policy pack (its real gRPC entry point)")
    started = time.monotonic()
    policies = check_policies(graph, policy_config, project_dir / "policy", pack)
    return Plan(site, graph, policies, time.monotonic() - started)


def summarize(result: Plan) -> Summary:
    site, graph = result.site, result.graph
    groups: dict[str, GroupRow] = {}
    per_rack: dict[str, list[dict[str, Any]]] = {}
    for node in graph.of_type(GPU_NODE_TYPE):
        out = node.outputs
        row = groups.setdefault(out["node_group"], GroupRow(out["node_group"], out["pool"], out["gpu_model"]))
        row.nodes += 1
        row.gpus += int(out["gpu_count"])
        per_rack.setdefault(out["rack"], []).append(out)
    racks = []
    for rack in graph.of_type(RACK_TYPE):
        out = rack.outputs
        racks.append(RackRow(
            rack=rack.name,
            room=out["room"],
            nodes=len(per_rack.get(rack.name, [])),
            gpus=int(out["gpu_count"]),
            it_load_kw=out["it_load_kw"],
            usable_kw=out["usable_kw"],
            heat_load_kw=out["heat_load_kw"],
            cooling_type=out["cooling_type"],
            cooling_capacity_kw=out["cooling_capacity_kw"],
            feed_capacity_kw=out["feed_capacity_kw"],
            failed_checks=sorted(rule for rule, ok in out["verdicts"].items() if not ok),
        ))
    counts = Counter(r.type for r in graph.resources.values() if r.type != STACK_TYPE)
    onboarded = [t.name for t in site.teams_onboarded()]
    by_team = {r.outputs["team"]: r.outputs for r in graph.of_type(TEAM_TYPE)}
    teams = []
    for name in onboarded:
        team = by_team[name]
        account = team["slurm_account"]
        teams.append(TeamRow(
            team=name, stage=team["stage"], gpu_quota={f: int(n) for f, n in team["gpu_quota"].items()},
            gpu_guaranteed={f: int(n) for f, n in team["gpu_guaranteed"].items()},
            local_queue=team["local_queue"], storage_class=team["storage_class"],
            slurm_default_qos=account["default_qos"], slurm_qos=account["qos"], fairshare=int(account["fairshare"]),
        ))
    return Summary(
        stack=graph.stack,
        stage=graph.resources[_one(graph, CLUSTER_TYPE)].inputs["stage"],
        teams_onboarded=onboarded,
        teams_total=len(site.teams),
        groups=sorted(groups.values(), key=lambda g: g.node_group),
        racks=sorted(racks, key=lambda r: r.rack),
        resources_by_type=dict(sorted(counts.items())),
        storage=graph.resources[_one(graph, STORAGE_TYPE)].outputs,
        teams=teams,
        scheduling=graph.resources[_one(graph, SCHEDULING_TYPE)].outputs,
        slurm_qos=graph.resources[_one(graph, SLURM_TYPE)].outputs["qos"],
        inference=graph.resources[_one(graph, INFERENCE_TYPE)].outputs,
        policies=result.policies,
    )


def _one(graph: ResourceGraph, type_: str) -> str:
    (resource,) = graph.of_type(type_)
    return resource.urn


def kubernetes_objects(graph: ResourceGraph) -> dict[str, dict[str, Any]]:
    """The Kubernetes objects the program registers directly, as manifests by URN (patches of existing objects left
    out)."""
    return {r.urn: manifest(r.type, r.inputs) for r in graph.resources.values()
            if is_kubernetes_object(r.type) and not r.type.endswith("Patch")}


def host_installs(graph: ResourceGraph) -> dict[str, tuple[dict[str, str], str]]:
    """Per remote command: the files it installs on its host (path: content) and what it runs then."""
    return {r.name: installed_files(r.inputs["create"]) for r in graph.of_type("command:remote:Command")
            if isinstance(r.inputs.get("create"), str)}
