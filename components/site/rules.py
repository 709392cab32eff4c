"""Cross-field rules of the site spec that read the spec alone: small named checks, each returning every problem it
finds. The rules that need a planner's figures (rack power and cooling, team quotas against Kueue flavors, the
preemption table) live beside their planners and are composed with these in components.validate."""

import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from components.site import defaults
from components.site.acceptance import DrillKind, PeakSource
from components.site.problems import Problem
from components.site.site import KUBERNETES_POOLS, SLURM_POOLS, Pool, Site
from components.site.wellknown import PLATFORM_ACCOUNT

Check = Callable[[Site], list[Problem]]
Subject = TypeVar("Subject")


@dataclass(frozen=True)
class Rule(Generic[Subject]):
    """A named check: its problems carry the rule's id, stamped by `judge`, so a check never types its own name and
    every id a problem can carry is one a Rule declares (tests/components/test_rules.py holds the docs to them)."""

    id: str
    check: Callable[[Subject], list[Problem]]
    reads: frozenset[str]
    """Top-level keys of the spec the check reads: when one of them failed to parse, the check is skipped, so a type
    error in one section leaves every rule over the other sections running (components.site.sections)."""

    def judge(self, subject: Subject) -> list[Problem]:
        return [replace(p, rule=self.id) for p in self.check(subject)]


def rule(id: str, check: Callable[[Subject], list[Problem]], *reads: str) -> Rule[Subject]:
    return Rule(id, check, frozenset(reads))


def _unique(items: Iterable[tuple[str, str]]) -> list[Problem]:
    """items: (path, name) pairs; a name seen twice is a problem at its second path."""
    seen: dict[str, str] = {}
    problems = []
    for path, name in items:
        if name in seen:
            problems.append(Problem(f"{path}.name", f'"{name}" is already used by {seen[name]}'))
        else:
            seen[name] = path
    return problems


def dangling(path: str, kind: str, name: str, known: Iterable[str]) -> Problem:
    names = ", ".join(dict.fromkeys(known)) or "none defined"
    return Problem(path, f'no {kind} named "{name}" (known: {names})')


def check_unique_rooms(site: Site) -> list[Problem]:
    return _unique((f"rooms[{i}]", r.name) for i, r in enumerate(site.rooms))


def check_unique_racks(site: Site) -> list[Problem]:
    pdus = [
        p
        for i, rack in enumerate(site.racks)
        for p in _unique((f"racks[{i}].pdus[{j}]", pdu.name) for j, pdu in enumerate(rack.pdus))
    ]
    return _unique((f"racks[{i}]", r.name) for i, r in enumerate(site.racks)) + pdus


def check_unique_nodes(site: Site) -> list[Problem]:
    nodes = [
        (f"node_groups[{i}].nodes[{j}]", node.name)
        for i, group in enumerate(site.node_groups)
        for j, node in enumerate(group.nodes)
    ]
    return _unique((f"node_groups[{i}]", g.name) for i, g in enumerate(site.node_groups)) + _unique(nodes)


def check_unique_stages(site: Site) -> list[Problem]:
    return _unique((f"stages[{i}]", s.name) for i, s in enumerate(site.stages))


def check_rack_rooms(site: Site) -> list[Problem]:
    rooms = [r.name for r in site.rooms]
    return [
        dangling(f"racks[{i}].room", "room", rack.room, rooms)
        for i, rack in enumerate(site.racks) if rack.room not in rooms
    ]


def check_node_racks(site: Site) -> list[Problem]:
    racks = [r.name for r in site.racks]
    return [
        dangling(f"node_groups[{i}].nodes[{j}].rack", "rack", node.rack, racks)
        for i, group in enumerate(site.node_groups)
        for j, node in enumerate(group.nodes) if node.rack not in racks
    ]


def check_gpu_models(site: Site) -> list[Problem]:
    return [
        dangling(f"node_groups[{i}].gpu_model", "gpu_catalog entry", group.gpu_model, sorted(site.gpu_catalog))
        for i, group in enumerate(site.node_groups) if group.gpu_model not in site.gpu_catalog
    ]


def check_stage_references(site: Site) -> list[Problem]:
    stages = [s.name for s in site.stages]
    problems = [
        dangling(f"teams[{i}].stage", "stage", team.stage, stages)
        for i, team in enumerate(site.teams) if team.stage not in stages
    ]
    if site.stage not in stages:
        problems.append(dangling("stage", "stage", site.stage, stages))
    return problems


def check_stage_sizes(site: Site) -> list[Problem]:
    """Teams onboarded by a stage and those before it stay within the stage's max_teams."""
    problems = []
    onboarded: list[str] = []
    for i, stage in enumerate(site.stages):
        onboarded += [t.name for t in site.teams if t.stage == stage.name]
        if stage.max_teams is not None and len(onboarded) > stage.max_teams:
            problems.append(Problem(
                f"stages[{i}].max_teams",
                f"{len(onboarded)} teams are onboarded by {stage.name} ({', '.join(onboarded)}), "
                f"more than its limit of {stage.max_teams}",
            ))
    return problems


def check_first_stage_empty(site: Site) -> list[Problem]:
    """The first stage onboards no team: the first `pulumi up` deploys it with no request, no approval and no
    acceptance campaign (there is no deployment to run one on yet), so a team there would skip every gate."""
    first = site.stages[0].name
    return [Problem(f"teams[{i}].stage", f'team "{team.name}" is onboarded by {first}, the first stage, which the '
                                         "first `pulumi up` deploys before any acceptance campaign or approval: "
                                         "the first stage onboards no team; name a later one")
            for i, team in enumerate(site.teams) if team.stage == first]


def check_team_onboarding(site: Site) -> list[Problem]:
    """A team joins once, in one stage: the same name twice is a problem at its second entry."""
    first: dict[str, int] = {}
    problems = []
    for i, team in enumerate(site.teams):
        if team.name not in first:
            first[team.name] = i
            continue
        earlier = site.teams[first[team.name]]
        if earlier.stage != team.stage:
            problems.append(Problem(
                f"teams[{i}].stage", f'team "{team.name}" is already onboarded by stage {earlier.stage} '
                f"(teams[{first[team.name]}]); a team joins in one stage only"))
        else:
            problems.append(Problem(f"teams[{i}].name", f'"{team.name}" is already used by teams[{first[team.name]}]'))
    return problems


def check_retention(site: Site) -> list[Problem]:
    m = site.monitoring
    if m.cold_retention_days > m.hot_retention_days:
        return []
    return [Problem(
        "monitoring.cold_retention_days",
        f"the cold tier ({m.cold_retention_days} days) must outlast the hot tier ({m.hot_retention_days} days)",
    )]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def check_driver_version(site: Site) -> list[Problem]:
    installed, required = site.gpu_operator.driver_version, site.node_check.min_driver_version
    if _version(installed) >= _version(required):
        return []
    return [Problem(
        "gpu_operator.driver_version",
        f"{installed} is older than node_check.min_driver_version {required}, the oldest driver the site accepts",
    )]


def check_slurm_version(site: Site) -> list[Problem]:
    version = site.slurm.package_version
    if _version(version.split("-")[0])[:2] >= defaults.SLURM_OLDEST_RELEASE:
        return []
    oldest = ".".join(f"{part:02d}" if i else str(part) for i, part in enumerate(defaults.SLURM_OLDEST_RELEASE))
    return [Problem("slurm.package_version",
                    f"{version} is older than Slurm {oldest}, the oldest release the site runs")]


def check_slurmd_ports(site: Site) -> list[Problem]:
    """Slurm nodes that share an ssh_host run one slurmd each on that host (slurm.conf(5) NodeName Port=): two on one
    port would fight for it, and slurmctld would reach only one of them."""
    seen: dict[tuple[str, int], str] = {}
    problems = []
    for i, group in enumerate(site.node_groups):
        if group.pool not in SLURM_POOLS:
            continue
        for j, node in enumerate(group.nodes):
            port = node.slurmd_port or site.slurm.slurmd_port
            other = seen.setdefault((node.ssh_host, port), node.name)
            if other != node.name:
                problems.append(Problem(f"node_groups[{i}].nodes[{j}].slurmd_port",
                                        f"{node.name}'s slurmd would listen on {node.ssh_host}:{port}, as {other}'s "
                                        "does: give each Slurm node on one host a port of its own"))
    return problems


def check_node_failure_detectable(site: Site) -> list[Problem]:
    """Slurm sees a dead node only after SlurmdTimeout: a node-failure drill must be given that long to detect it."""
    acceptance, timeout = site.acceptance, site.slurm.slurmd_timeout_s
    return [Problem(f"acceptance.drills[{i}].detect_within_s",
                    f"{acceptance.scaled(d.detect_within_s):g} s (scaled) is shorter than slurm.slurmd_timeout_s "
                    f"{timeout} s: Slurm cannot mark the failed node down by then")
            for i, d in enumerate(acceptance.drills)
            if d.kind == DrillKind.NODE_FAILURE and acceptance.scaled(d.detect_within_s) < timeout]


def check_inference_names(site: Site) -> list[Problem]:
    """A gateway model name is one model: served and external names share one namespace."""
    inference = site.inference
    return _unique([*((f"inference.models[{i}]", m.name) for i, m in enumerate(inference.models)),
                    *((f"inference.external[{i}]", a.name) for i, a in enumerate(inference.external))])


def check_inference_teams(site: Site) -> list[Problem]:
    """Every team a model, an external API or a budget names exists; a budget may also be the platform account's
    (what the acceptance campaign's inference load may spend)."""
    teams = [t.name for t in site.teams]
    inference = site.inference
    budgets = [*teams, PLATFORM_ACCOUNT]
    named = [*((f"inference.models[{i}].teams", m.teams or [], teams) for i, m in enumerate(inference.models)),
             *((f"inference.external[{i}].teams", a.teams or [], teams) for i, a in enumerate(inference.external)),
             ("inference.gateway.team_budgets", list(inference.gateway.team_budgets), budgets)]
    return [dangling(path, "team", team, known) for path, names, known in named for team in names
            if team not in known]


def check_served_models_fit(site: Site) -> list[Problem]:
    """A served model runs on a GPU the inference pools have, a replica fits one node, and its most replicas fit the
    pools (the kubernetes pool and the lendable flex pool)."""
    problems = []
    for i, model in enumerate(site.inference.models):
        path = f"inference.models[{i}]"
        groups = [g for g in site.node_groups if g.gpu_model == model.gpu_model and g.pool in KUBERNETES_POOLS]
        if not groups:
            known = sorted({g.gpu_model for g in site.node_groups if g.pool in KUBERNETES_POOLS})
            problems.append(dangling(f"{path}.gpu_model", "GPU model in the kubernetes or flex pool", model.gpu_model,
                                     known))
            continue
        widest = max(g.gpus_per_node for g in groups)
        if model.gpus_per_replica > widest:
            problems.append(Problem(f"{path}.gpus_per_replica", f"{model.gpus_per_replica} GPUs per replica do not "
                                    f"fit one node ({widest} {model.gpu_model} per node)"))
        capacity = sum(len(g.nodes) * (g.gpus_per_node // model.gpus_per_replica) for g in groups)
        if model.replicas.max > capacity:
            problems.append(Problem(f"{path}.replicas.max", f"{model.replicas.max} replicas of "
                                    f"{model.gpus_per_replica} GPUs need more than the {capacity} that fit on the "
                                    f"{model.gpu_model} nodes of the kubernetes and flex pools"))
    return problems


def check_served_models_priced(site: Site) -> list[Problem]:
    """A served model's GPU has an hourly cost to price its tokens from."""
    return [Problem("inference.gpu_hour_usd", f"no hourly cost for {model.gpu_model}, which inference.models[{i}] "
                    "runs on: its tokens cannot be priced")
            for i, model in enumerate(site.inference.models) if model.gpu_model not in site.inference.gpu_hour_usd]


def check_training_floor(site: Site) -> list[Problem]:
    """The floor leaves the controller something to lend: at least one flex node above it."""
    flex = sum(len(g.nodes) for g in site.node_groups if g.pool == Pool.FLEX)
    floor = site.lending.training_floor_nodes
    if not flex or floor < flex:
        return []
    return [Problem("lending.training_floor_nodes", f"a floor of {floor} keeps all {flex} flex nodes in Slurm: "
                    "the controller could never lend one")]


def _lendable_nodes(site: Site, gpu_model: str) -> tuple[int, int]:
    """(flex nodes of the GPU model, those of them the controller may lend above lending.training_floor_nodes)."""
    flex = [g for g in site.node_groups if g.pool == Pool.FLEX]
    of_model = sum(len(g.nodes) for g in flex if g.gpu_model == gpu_model)
    above_floor = max(0, sum(len(g.nodes) for g in flex) - site.lending.training_floor_nodes)
    return of_model, min(of_model, above_floor)


def check_lent_replicas(site: Site) -> list[Problem]:
    """Lending serves someone: each GPU model of the flex pool has a served model that may add replicas on its lent
    nodes, and a model's lent replicas fit the flex nodes of its GPU that the controller may lend."""
    problems = []
    flex_gpus = {g.gpu_model: g.gpus_per_node for g in site.node_groups if g.pool == Pool.FLEX}
    for gpu, per_node in flex_gpus.items():
        nodes, lendable = _lendable_nodes(site, gpu)
        users = [m for m in site.inference.models
                 if m.gpu_model == gpu and m.lent_replicas > 0 and m.gpus_per_replica <= per_node]
        if lendable and not users:
            problems.append(Problem("inference.models[].lent_replicas", f"{lendable} of the {nodes} {gpu} flex nodes "
                                    f"can be lent ({lendable * per_node} GPUs above lending.training_floor_nodes "
                                    f"{site.lending.training_floor_nodes}), but no served {gpu} model has "
                                    "lent_replicas over 0: a lend would serve no one"))
    for i, model in enumerate(site.inference.models):
        if not model.lent_replicas:
            continue
        path = f"inference.models[{i}].lent_replicas"
        per_node = flex_gpus.get(model.gpu_model, 0) // model.gpus_per_replica
        nodes, lendable = _lendable_nodes(site, model.gpu_model)
        if model.lent_replicas > lendable * per_node:
            problems.append(Problem(path, f"{model.lent_replicas} replicas of {model.gpus_per_replica} "
                                    f"{model.gpu_model} GPUs need more than the {lendable * per_node} that fit on the "
                                    f"{lendable} of {nodes} {model.gpu_model} flex nodes the controller may lend"))
    return problems


def check_lend_above_autoscaler(site: Site) -> list[Problem]:
    """Inference borrows Slurm's nodes only for queues its own pool cannot absorb: the controller's lend threshold is
    above every served model's autoscaler threshold, since KEDA adds a replica on the kubernetes pool at that queue
    (components/inference/values.py) and the controller reads the queue per replica over every model."""
    lend = site.lending.lend_waiting_per_replica
    return [Problem("lending.lend_waiting_per_replica", f"{lend:g} is not above the {model.waiting_per_replica} "
                    f"waiting per replica at which the autoscaler adds a replica of inference.models[{i}] "
                    f"{model.name}: the controller would lend Slurm's nodes for queues the kubernetes pool can still "
                    "absorb by scaling")
            for i, model in enumerate(site.inference.models) if lend <= model.waiting_per_replica]


def check_peak_window_retained(site: Site) -> list[Problem]:
    """The acceptance campaign measures the peak over the hot tier's history (the Prometheus at
    rollout.prometheus_url): a longer window asks for days it no longer holds."""
    acceptance, hot = site.acceptance, site.monitoring.hot_retention_days
    if acceptance.peak_source != PeakSource.PROMETHEUS or acceptance.peak_window_days <= hot:
        return []
    return [Problem("acceptance.peak_window_days", f"{acceptance.peak_window_days} days of history to measure the "
                    f"peak over, but the hot tier keeps monitoring.hot_retention_days {hot}: the peak window must lie "
                    "within hot retention, or the campaign reads days Prometheus no longer holds")]


def check_scraped_listeners(site: Site) -> list[Problem]:
    """Prometheus scrapes the controller's exporters from the cluster at slurm.controller_host
    (components.monitoring.prometheus): one that binds a loopback address answers nobody there, and its Down alert
    fires for good."""
    listeners = (("slurm.exporter_address", site.slurm.exporter_address, site.slurm.exporter_port, "Slurm exporter"),
                 ("lending.metrics_address", site.lending.metrics_address, site.lending.metrics_port,
                  "lending controller"),
                 ("health.metrics_address", site.health.metrics_address, site.health.metrics_port,
                  "health controller"))
    return [Problem(path, f"{address} is a loopback address, but Prometheus scrapes the {what} from the cluster at "
                    f"{site.slurm.controller_host}:{port}: set the address the controller has there")
            for path, address, port, what in listeners if ipaddress.ip_address(address).is_loopback]


SPEC_RULES: tuple[Rule[Site], ...] = (
    rule("unique-names", check_unique_rooms, "rooms"),
    rule("unique-names", check_unique_racks, "racks"),
    rule("unique-names", check_unique_nodes, "node_groups"),
    rule("unique-names", check_unique_stages, "stages"),
    rule("references", check_rack_rooms, "racks", "rooms"),
    rule("references", check_node_racks, "node_groups", "racks"),
    rule("references", check_gpu_models, "node_groups", "gpu_catalog"),
    rule("references", check_stage_references, "teams", "stages", "stage"),
    rule("stage-sizes", check_stage_sizes, "stages", "teams"),
    rule("first-stage-empty", check_first_stage_empty, "stages", "teams"),
    rule("team-onboarding", check_team_onboarding, "teams"),
    rule("retention", check_retention, "monitoring"),
    rule("driver-version", check_driver_version, "gpu_operator", "node_check"),
    rule("slurm-version", check_slurm_version, "slurm"),
    rule("slurmd-ports-distinct", check_slurmd_ports, "node_groups", "slurm"),
    rule("node-failure-detectable", check_node_failure_detectable, "acceptance", "slurm"),
    rule("unique-names", check_inference_names, "inference"),
    rule("references", check_inference_teams, "inference", "teams"),
    rule("served-models-fit", check_served_models_fit, "inference", "node_groups"),
    rule("served-models-priced", check_served_models_priced, "inference"),
    rule("training-floor", check_training_floor, "lending", "node_groups"),
    rule("lent-nodes-used", check_lent_replicas, "inference", "lending", "node_groups"),
    rule("lend-above-autoscaler", check_lend_above_autoscaler, "lending", "inference"),
    rule("peak-window-within-hot-retention", check_peak_window_retained, "acceptance", "monitoring"),
    rule("listeners-scraped", check_scraped_listeners, "slurm", "lending", "health"),
)
"""Rules that read the spec alone; components.validate adds those that need a planner (racks, quotas, preemption)."""
