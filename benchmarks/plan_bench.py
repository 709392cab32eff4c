"""Benchmark the offline plan against three floors of the Pulumi SDK, in CPU time, in the same run.

Per size (GPUs; 128 is the prod site, Pulumi.prod.yaml; a larger size is that many GPUs / 128 copies of the
prod site's racks and nodes, so the mix of Slurm, flex and Kubernetes nodes stays prod's), four programs run
under the offline engine, each in a child process of its own:

- plan: what `gpuctl plan` does minus printing and policies (parse_site, then run_program of __main__.py);
- replay floor: a bare program that re-registers the plan's own recorded graph (every resource with its type,
  name, parent, dependencies, provider and inputs, components with their outputs) as plain values, each custom
  resource a generic CustomResource: what the SDK's registration costs for exactly this graph;
- typed floor: the same replay, each custom resource registered through the SDK class the plan registers it by
  (pulumi_kubernetes' ConfigMap, Release, ..., pulumi_command's Command) with its recorded inputs as that class's
  arguments, still as plain values: what the SDK's typed classes cost on top of the replay floor (their type hints,
  typed serialization, their constructors and an Output for each property they declare), so plan/typed is the
  project's own code and its Outputs alone;
- bare floor: as many empty ComponentResources, nested as deep as GpuCluster > Facility > Rack > GpuNode.

A first child per size runs the plan once to record its graph (for the replay), the modules it imported (every
later child imports them before its clock, so no one pays the ~110 Pulumi submodules loaded lazily during the
run) and, with --policy, the policy pack's wall time on that graph (over its real gRPC entry point). Then
--samples rounds run plan, replay, typed and bare one after the other (paired, so a noisy machine slows all four
alike). Each child times its run in CPU time (process_time: every thread of the SDK's pool) and wall time, and reads
its peak RSS as the run ends (getrusage), before it digests the graph it registered: the plan's, the replay's and
the typed floor's digests must all be the recorded plan's. min and median are printed.

Then, per size, the command users run end to end (issue 40): `gpuctl plan --out` with the chart mirror (every Helm
release rendered by the real Helm, parsed, validated and written) and without it, --e2e-samples rounds of the two one
after the other (--e2e-large-samples past 1,024 GPUs, one by default: a round at 8,192 GPUs takes minutes), each a
fresh process timed in wall-clock time and in CPU time (user + system of it and every child
it waited for: Helm, the policy pack, its YAML workers, the consumers). The prod size runs the repo's own stack, as
`make plan` does; a larger one a copy of the project whose Pulumi.prod.yaml holds the generated site. Each size's
end-to-end figures are printed beside its program-only ones (the plan child above), each beside its target.

Run from the repo root: `make bench` or `.venv/bin/python benchmarks/plan_bench.py [--sizes 128,1024]`.
Targets, printed and not asserted (issue 22): plan at most 1.5x the replay of its own resources at each size; the
largest size's plan plus policy pack under 20 s; prod plan under 5 s. Issue 40: prod `gpuctl plan --chart-mirror`
end to end at most 4 s (median wall time) and at most 1.5x the same command without the mirror. The plan's 1.5x of
issue 22 is judged against the typed floor: of the two replays it is the one that re-registers the plan's own
resources (the same SDK classes, the same inputs) with none of the project's code. The plain replay floor registers
them as generic CustomResources, which skips what each class does on every registration: an Output (a task and four
futures) for each property it declares, 36 for a helm Release, where a CustomResource makes one per input it is
given. No program that uses the classes avoids that, so plan/replay and typed/replay are printed, but the project's
own cost is plan/typed.
"""

import argparse
import hashlib
import importlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runbooks.offline.engine import ResourceGraph, StackConfig

REPO = Path(__file__).resolve().parent.parent
PROJECT = "gpu-cluster"
PROD_GPUS = 128
"""The prod site's GPUs (Pulumi.prod.yaml): size 128 is the prod site itself."""
SIZES = (PROD_GPUS, 1024, 8192)
"""Issue 22's sizes."""
SAMPLES = 3
NODES_PER_RACK = 4
"""The bare floor's nesting: as many nodes to a rack as the prod site's racks hold."""
REPLAY_TARGET = 1.5
LARGEST_WITH_POLICY_TARGET_S = 20.0
PROD_PLAN_TARGET_S = 5.0
E2E_SAMPLES = 5
E2E_LARGE_SAMPLES = 1
E2E_LARGE_GPUS = 1024
"""Past this size `gpuctl plan` end to end runs E2E_LARGE_SAMPLES rounds (a round at 8,192 GPUs is about two minutes
of wall time here, with and without the mirror), printed as such."""
PLAN_WITH_CHARTS_TARGET_S = 4.0
CHARTS_RATIO_TARGET = 1.5
"""Issue 40: prod's plan with the chart mirror, median wall time, and its ratio to the plan without."""
CHART_MIRROR = REPO.parent / "shared" / "charts"
"""The chart mirror `make plan` renders from (../shared/charts)."""
HELD = 3
"""gpuctl's exit code when a mandatory policy or an invariant holds the plan: a generated site may break one."""
REPLAY_MODULE = "plan_bench_replay"
"""The module the replay program reads its graph from; the child fills it before the clock."""

BARE_PROGRAM = """\
import pulumi

config = pulumi.Config()


class Trivial(pulumi.ComponentResource):
    def __init__(self, name, parent=None):
        super().__init__("bench:floor:Trivial", name, None, pulumi.ResourceOptions(parent=parent))


# As deep as the plan: root > facility > (rack > nodes_per_rack nodes)...; count excludes the Stack.
count, rack_size = config.require_int("count"), 1 + config.require_int("nodes_per_rack")
facility = Trivial("facility", Trivial("root"))
for i in range(count - 2):
    if i % rack_size == 0:
        rack = Trivial(f"rack-{i}", facility)
    else:
        Trivial(f"node-{i}", rack)
"""

REPLAY_PROGRAM = f"""\
import pulumi
from {REPLAY_MODULE} import RESOURCES, STACK_OUTPUTS

made = {{}}
for r in RESOURCES:  # parents, dependencies and providers first
    opts = pulumi.ResourceOptions(
        parent=made.get(r["parent"]), depends_on=[made[d] for d in r["dependencies"]],
        provider=made.get(r["provider"]), protect=r["protect"], ignore_changes=r["ignore_changes"])
    if r["type"].startswith("pulumi:providers:"):
        made[r["urn"]] = pulumi.ProviderResource(r["type"].split(":")[2], r["name"], r["inputs"], opts)
    elif r.get("class"):  # the typed floor: the SDK's class, the inputs as its arguments
        made[r["urn"]] = r["class"](r["name"], opts=opts, **r["arguments"])
    elif r["custom"]:
        made[r["urn"]] = pulumi.CustomResource(r["type"], r["name"], r["inputs"], opts)
    else:
        component = made[r["urn"]] = pulumi.ComponentResource(r["type"], r["name"], r["inputs"], opts)
        component.register_outputs(r["outputs"])
for key, value in STACK_OUTPUTS.items():
    pulumi.export(key, value)
"""


def generated_site(prod: "StackConfig", gpus: int) -> "StackConfig":
    """The prod site copied gpus / 128 times: each copy of its racks and node groups (Slurm, flex and Kubernetes
    nodes, A800 and RTX 4090) renamed, with hosts of their own; everything else (teams, models, stage) as prod's."""
    copies, rest = divmod(gpus, PROD_GPUS)
    if rest or copies < 1:
        raise SystemExit(f"--sizes: {gpus} GPUs is no multiple of the prod site's {PROD_GPUS}")
    racks, groups = json.loads(prod.values[f"{PROJECT}:racks"]), json.loads(prod.values[f"{PROJECT}:node_groups"])
    scaled_racks = [
        {**rack, "name": f"{rack['name']}{copy:03d}",
         "pdus": [{**pdu, "name": f"{rack['name']}{copy:03d}-{pdu['name']}"} for pdu in rack["pdus"]]}
        for copy in range(copies) for rack in racks
    ]
    hosts = iter(range(1 << 16))
    scaled_groups = [
        {**group, "nodes": [
            {**node, "name": f"{node['name']}-{copy:03d}", "rack": f"{node['rack']}{copy:03d}",
             "ssh_host": f"10.20.{(host := next(hosts)) // 250}.{1 + host % 250}",
             "bmc_host": f"10.21.{host // 250}.{1 + host % 250}"}
            for copy in range(copies) for node in group["nodes"]
        ]}
        for group in groups
    ]
    values = {**prod.values, f"{PROJECT}:racks": json.dumps(scaled_racks),
              f"{PROJECT}:node_groups": json.dumps(scaled_groups)}
    return replace(prod, values=values)


def replayable(graph: "ResourceGraph") -> dict[str, Any]:
    """The recorded graph as plain JSON, each resource after its parent, dependencies and provider."""
    from runbooks.offline.engine import STACK_TYPE
    from runbooks.plan.files import redacted as plain

    def before(r: Any) -> list[str]:
        provider = r.options.get("provider", "").rsplit("::", 1)[0]
        return [u for u in [r.parent, provider, *r.dependencies] if u in graph.resources and u != graph.stack_urn]

    ordered: list[dict[str, Any]] = []
    placed: set[str] = set()
    for urn in graph.resources:  # depth-first, so every resource follows what it needs
        stack = [urn]
        while stack:
            current = graph.resources[stack[-1]]
            if current.urn in placed or current.type == STACK_TYPE:
                stack.pop()
                continue
            missing = [u for u in before(current) if u not in placed]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            placed.add(current.urn)
            provider = current.options.get("provider", "").rsplit("::", 1)[0]
            ordered.append({
                "urn": current.urn, "type": current.type, "name": current.name, "custom": current.custom,
                "parent": current.parent, "dependencies": [u for u in current.dependencies if u in graph.resources],
                "provider": provider, "protect": bool(current.options.get("protect")),
                "ignore_changes": current.options.get("ignore_changes", []),
                "inputs": plain(current.inputs), "outputs": plain(current.outputs),
            })
    return {"resources": ordered, "stack_outputs": plain(graph.stack_outputs)}


def through_classes(resources: list[dict[str, Any]]) -> dict[str, int]:
    """Give each custom resource the SDK class the plan registers its type by, and its recorded inputs (wire names)
    as that class's arguments (Python names, from the SDK's own name table); a kind with no class of its own (a
    custom resource of a CRD: Kueue's queues, the Prometheus operator's rules) gets apiextensions.CustomResource, as
    in the plan. A resource with an input no argument takes stays a plain CustomResource. Returns how many got a
    class, how many properties those classes declare (each an Output on every registration) and how many inputs
    those resources have (one Output each as plain CustomResources). The SDK's name tables filled here are emptied
    again, so the floor's clock finds them as the plan's does."""
    from pulumi import _types
    from pulumi.runtime import rpc
    from pulumi_kubernetes.apiextensions import CustomResource as KubernetesCustomResource

    classes = {}
    for modules in rpc._RESOURCE_MODULES.values():
        for module in modules:
            info = module.mod_info  # type: ignore[attr-defined]  # the providers' Module (their _utilities.py)
            for type_, name in info["classes"].items():
                classes[type_] = getattr(importlib.import_module(info["fqn"]), name)
    typed = declared = given = 0
    for r in resources:
        if not r["custom"] or r["type"].startswith("pulumi:providers:"):
            continue
        inputs = dict(r["inputs"])
        cls = classes.get(r["type"])
        if cls is None and r["type"].startswith("kubernetes:") and {"apiVersion", "kind"} <= inputs.keys():
            cls, names = KubernetesCustomResource, {"apiVersion": "api_version", "kind": "kind",
                                                    "metadata": "metadata", "spec": "spec"}
        elif cls is not None:
            names = _types.resource_pulumi_to_py_names(cls)
            for fixed in ("apiVersion", "kind", "compat"):  # pulumi_kubernetes' classes set these themselves
                inputs.pop(fixed, None)
        if cls is None or not inputs.keys() <= names.keys():
            continue
        r["class"], r["arguments"] = cls, {names[k]: v for k, v in inputs.items()}
        typed, declared, given = typed + 1, declared + len(names), given + len(r["inputs"])
    _types._py_properties.cache_clear()
    return {"typed": typed, "declared": declared, "given": given}


def measure(kind: str, gpus: int, work: Path) -> dict[str, Any]:
    """In the child: one run of `kind` at `gpus`, its imports before the clock."""
    import components.cluster  # noqa: F401 (what __main__.py imports)
    from components.validate import parse_site
    from runbooks.offline.engine import StackConfig, load_stack_config, run_program

    modules = work / "modules.json"
    # What the recording plan loaded during its run, parents first. The SDKs load subpackages lazily (a module in
    # sys.modules that runs on first attribute access): touching one loads it as the program would.
    for name in sorted(json.loads(modules.read_text()) if modules.exists() else [], key=lambda n: (n.count("."), n)):
        getattr(sys.modules.get(name) or importlib.import_module(name), "loaded_before_the_clock", None)
    prod = load_stack_config(REPO, "prod")
    config = prod if gpus == PROD_GPUS else generated_site(prod, gpus)
    project, figures = REPO, dict[str, Any]()
    if kind in ("replay", "typed"):
        recorded = json.loads((work / "graph.json").read_text())
        if kind == "typed":
            figures.update(through_classes(recorded["resources"]))
        replay = types.ModuleType(REPLAY_MODULE)
        replay.RESOURCES, replay.STACK_OUTPUTS = recorded["resources"], recorded["stack_outputs"]  # type: ignore[attr-defined]
        sys.modules[REPLAY_MODULE] = replay
        project = work / "replay"
    elif kind == "bare":
        count = len(json.loads((work / "graph.json").read_text())["resources"])
        config = StackConfig(PROJECT, {f"{PROJECT}:count": str(count), f"{PROJECT}:nodes_per_rack":
                                       str(NODES_PER_RACK)}, frozenset())
        project = work / "bare"
    cpu, wall = time.process_time(), time.perf_counter()
    if kind in ("plan", "record"):
        parse_site(*config.project_values())
    graph = run_program(project, "prod", config)  # the stack the generated sites derive from
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    figures["mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if kind != "bare":  # what the floors register must be the plan's graph, every input and dependency alike
        registered = replayable(graph)
        resources = sorted(registered["resources"], key=lambda r: r["urn"])  # registration order varies
        figures["graph"] = hashlib.sha256(json.dumps(resources, sort_keys=True).encode()).hexdigest()
    if kind == "record":
        (work / "graph.json").write_text(json.dumps(registered))
        modules.write_text(json.dumps(sorted(n for n in sys.modules if n.startswith(("pulumi", "components")))))
        if os.environ.get("PLAN_BENCH_POLICY") == "1":
            from runbooks.offline.policy_pack import check_policies

            def cpu_s() -> float:  # this process and its waited-for children: the pack
                own, pack = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
                return own.ru_utime + own.ru_stime + pack.ru_utime + pack.ru_stime

            started, started_cpu = time.perf_counter(), cpu_s()
            results = check_policies(graph)
            figures["policy_s"], figures["policy_cpu_s"] = time.perf_counter() - started, cpu_s() - started_cpu
            figures["policy_failed"] = sorted(r.name for r in results if not r.passed)
    return {"resources": len(graph.resources) - 1, "gpus": int(graph.stack_outputs.get("gpu_count", 0)),
            "custom": sum(r.custom and not r.type.startswith("pulumi:providers:") for r in graph.resources.values()),
            "cpu_s": cpu, "wall_s": wall, **figures}


def run_child(kind: str, gpus: int, work: Path, policy: bool = False) -> dict[str, Any]:
    """One run in a fresh interpreter; its figures come from its JSON line."""
    env = {**os.environ, "PLAN_BENCH_POLICY": "1" if policy else "0"}
    child = subprocess.Popen([sys.executable, __file__, "--one", kind, str(gpus), str(work)],
                             stdout=subprocess.PIPE, text=True, cwd=REPO, env=env)
    assert child.stdout is not None
    line = child.stdout.read()
    if child.wait() != 0:
        raise SystemExit(f"{kind} at {gpus} GPUs failed with exit code {child.returncode}")
    result: dict[str, Any] = json.loads(line)
    return result


def spread(values: list[float], unit: str = "s") -> str:
    return f"{min(values):.2f}/{statistics.median(values):.2f} {unit}"


def bench_size(gpus: int, samples: int, policy: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"plan-bench-{gpus}-") as folder:
        work = Path(folder)
        for kind, program in (("replay", REPLAY_PROGRAM), ("bare", BARE_PROGRAM)):
            (work / kind).mkdir()
            (work / kind / "Pulumi.yaml").write_text(f"name: {PROJECT}\nruntime: python\n")
            (work / kind / "__main__.py").write_text(program)
        print(f"{gpus:,} GPUs: recording the plan's graph and imports...", file=sys.stderr, flush=True)
        record = run_child("record", gpus, work, policy)
        runs: dict[str, list[dict[str, Any]]] = {"plan": [], "replay": [], "typed": [], "bare": []}
        for sample in range(samples):
            print(f"{gpus:,} GPUs: sample {sample + 1} of {samples}...", file=sys.stderr, flush=True)
            for kind, found in runs.items():
                found.append(run_child(kind, gpus, work))
        registered = {kind: {r["graph"] for r in found} for kind, found in runs.items() if kind != "bare"}
        if any(graphs != {record["graph"]} for graphs in registered.values()):
            raise SystemExit(f"{gpus:,} GPUs: a floor registered another graph than the plan's: {registered}")
        return {"gpus": gpus, "record": record, **runs}


def scaled_project(folder: Path, gpus: int) -> Path:
    """A copy of the project (as tests/builders.py copies it) whose Pulumi.prod.yaml holds generated_site(gpus)."""
    import yaml

    from runbooks.offline.engine import load_stack_config

    folder.mkdir()
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(REPO / name, folder / name)
    shutil.copytree(REPO / "policy", folder / "policy", ignore=shutil.ignore_patterns("__pycache__"))
    stack = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())
    scaled = generated_site(load_stack_config(REPO, "prod"), gpus)
    for key in (f"{PROJECT}:racks", f"{PROJECT}:node_groups"):
        stack["config"][key] = json.loads(scaled.values[key])
    (folder / "Pulumi.prod.yaml").write_text(yaml.safe_dump(stack, sort_keys=False))
    return folder


def children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def end_to_end(gpus: int, samples: int) -> dict[str, Any]:
    """`gpuctl plan --out` with the chart mirror ("charts") and without ("program"), paired round by round: the wall
    and CPU seconds of each run and the exit codes seen."""
    gpuctl = Path(sys.executable).with_name("gpuctl")
    runs: dict[str, Any] = {"gpus": gpus, "charts": [], "program": [], "exits": set()}
    with tempfile.TemporaryDirectory(prefix=f"plan-e2e-{gpus}-") as folder:
        work = Path(folder)
        project = REPO if gpus == PROD_GPUS else scaled_project(work / "project", gpus)
        for sample in range(samples):
            print(f"{gpus:,} GPUs: gpuctl plan with and without the chart mirror, round {sample + 1} of {samples}...",
                  file=sys.stderr, flush=True)
            for kind, mirror in (("charts", ["--chart-mirror", str(CHART_MIRROR)]), ("program", [])):
                argv = [str(gpuctl), "plan", "--stack", "prod", "--project-dir", str(project),
                        "--out", str(work / f"{kind}-{sample}"), *mirror]
                cpu, wall = children_cpu_s(), time.perf_counter()
                done = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                wall, cpu = time.perf_counter() - wall, children_cpu_s() - cpu
                if done.returncode not in (0, HELD):
                    raise SystemExit(f"{' '.join(argv)} failed with exit code {done.returncode}:\n{done.stderr}")
                runs[kind].append({"wall_s": wall, "cpu_s": cpu})
                runs["exits"].add(done.returncode)
    return runs


def judged(value: float, target: float, unit: str) -> str:
    """A figure beside its target: `7.51 s wall (at most 4 s: over)`; every time judged here is wall time."""
    shown = f"{value:.2f} s wall" if unit == "s" else f"{value:.2f}x"
    return f"{shown} (at most {target:g}{' s' if unit == 's' else 'x'}: {'within' if value <= target else 'over'})"


def print_end_to_end(rows: list[dict[str, Any]], program_rows: list[dict[str, Any]]) -> None:
    """The table of `gpuctl plan --out` rounds, then per size its end-to-end figures and the program-only ones, each
    beside its target. Issue 40's targets are prod's (4 s with the mirror, 1.5x the plan without); the ratio is held
    at every size too, since the charts' own work does not grow with the site."""
    print("\n`gpuctl plan --out` end to end, with the chart mirror and without; wall and CPU seconds (it and its "
          "children), min/median of the rounds; program-only: the plan child above (parse_site and the program under "
          "the offline engine, no policy pack, no files)")
    header = ("GPUs", "rounds", "with charts wall", "with charts CPU", "without wall", "without CPU", "ratio wall",
              "program-only wall", "program-only CPU", "exit codes")
    program = {row["gpus"]: row for row in program_rows}
    table: list[tuple[str, ...]] = [header]
    for row in rows:
        charts, without = ({k: [r[k] for r in row[kind]] for k in ("wall_s", "cpu_s")}
                           for kind in ("charts", "program"))
        row["ratio"] = statistics.median(charts["wall_s"]) / statistics.median(without["wall_s"])
        alone = program.get(row["gpus"])
        table.append((f"{row['gpus']:,}", str(len(row["charts"])), spread(charts["wall_s"]), spread(charts["cpu_s"]),
                      spread(without["wall_s"]), spread(without["cpu_s"]), f"{row['ratio']:.2f}x",
                      spread([r["wall_s"] for r in alone["plan"]]) if alone else "-",
                      spread([r["cpu_s"] for r in alone["plan"]]) if alone else "-",
                      ", ".join(map(str, sorted(row["exits"])))))
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)))
    print("targets (not asserted), medians:")
    for row in rows:
        wall = statistics.median(r["wall_s"] for r in row["charts"])
        end_to_end = judged(wall, PLAN_WITH_CHARTS_TARGET_S, "s") if row["gpus"] == PROD_GPUS else f"{wall:.2f} s wall"
        line = (f"  {row['gpus']:,} GPUs, {len(row['charts'])} round(s): `gpuctl plan --chart-mirror` {end_to_end}, "
                f"{judged(row['ratio'], CHARTS_RATIO_TARGET, 'x')} of the plan without the mirror")
        alone = program.get(row["gpus"])
        if alone:
            plan_wall = statistics.median(r["wall_s"] for r in alone["plan"])
            shown = judged(plan_wall, PROD_PLAN_TARGET_S, "s") if row["gpus"] == PROD_GPUS else \
                f"{plan_wall:.2f} s wall"
            line += f"; the program alone {shown}, {judged(alone['ratio'], REPLAY_TARGET, 'x')} of its typed floor"
            if "policy_s" in alone["record"]:
                with_pack = plan_wall + alone["record"]["policy_s"]
                line += f", with the policy pack {judged(with_pack, LARGEST_WITH_POLICY_TARGET_S, 's')}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)),
                        help=f"GPUs per site, comma-separated; {PROD_GPUS} is the prod site (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=SAMPLES, help="rounds of plan, replay, typed and bare per size")
    parser.add_argument("--no-policy", action="store_true", help="skip timing the policy pack at the largest size")
    parser.add_argument("--e2e-samples", type=int, default=E2E_SAMPLES,
                        help="rounds of `gpuctl plan` with and without the chart mirror per size (0: none)")
    parser.add_argument("--e2e-large-samples", type=int, default=E2E_LARGE_SAMPLES,
                        help=f"the same rounds for sizes over {E2E_LARGE_GPUS:,} GPUs")
    args = parser.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    if args.samples < 1 or min(args.e2e_samples, args.e2e_large_samples) < 0 or any(s < 8 or s % 8 for s in sizes):
        parser.error("--samples must be at least 1, --e2e-samples and --e2e-large-samples at least 0 and every size a "
                     "multiple of 8 GPUs (8 A800s a node)")
    if args.e2e_samples and not CHART_MIRROR.is_dir():
        parser.error(f"no chart mirror at {CHART_MIRROR}: give --e2e-samples 0")
    rows = [bench_size(gpus, args.samples, policy=not args.no_policy and gpus == sizes[-1]) for gpus in sizes]

    print("CPU seconds, min/median of the samples; ratios of medians (and of minimums); peak RSS median")
    header = ("GPUs", "resources", "plan", "replay floor", "typed floor", "bare floor", "plan/replay", "typed/replay",
              "plan/typed", "plan/bare", "plan MiB", "replay MiB", "bare MiB")
    table: list[tuple[str, ...]] = [header]
    for row in rows:
        cpu = {kind: [r["cpu_s"] for r in row[kind]] for kind in ("plan", "replay", "typed", "bare")}
        mib = {kind: statistics.median(r["mib"] for r in row[kind]) for kind in ("plan", "replay", "bare")}
        median = {kind: statistics.median(seconds) for kind, seconds in cpu.items()}
        row["ratio"] = median["plan"] / median["typed"]
        row["plain_ratio"], row["classes_ratio"] = median["plan"] / median["replay"], median["typed"] / median["replay"]
        table.append((
            f"{row['gpus']:,}", f"{row['record']['resources']:,}", spread(cpu["plan"]), spread(cpu["replay"]),
            spread(cpu["typed"]), spread(cpu["bare"]),
            f"{row['plain_ratio']:.2f}x ({min(cpu['plan']) / min(cpu['replay']):.2f}x)",
            f"{row['classes_ratio']:.2f}x", f"{row['ratio']:.2f}x ({min(cpu['plan']) / min(cpu['typed']):.2f}x)",
            f"{median['plan'] / median['bare']:.2f}x",
            f"{mib['plan']:.0f}", f"{mib['replay']:.0f}", f"{mib['bare']:.0f}"))
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)))
    for row in rows:
        typed = row["typed"][0]
        print(f"typed floor at {row['gpus']:,} GPUs: {typed['typed']:,} of {row['record']['custom']:,} custom "
              f"resources through their SDK class, which declare {typed['declared']:,} properties (an Output each) "
              f"for their {typed['given']:,} inputs")

    print("\ntargets (not asserted):")
    for row in rows:
        print(f"  {row['gpus']:,} GPUs: plan/typed floor {row['ratio']:.2f}x "
              f"({'within' if row['ratio'] <= REPLAY_TARGET else 'over'} {REPLAY_TARGET:g}x); "
              f"plan/replay floor {row['plain_ratio']:.2f}x, the SDK's classes alone "
              f"{row['classes_ratio']:.2f}x of the replay")
    if PROD_GPUS in sizes:
        prod_wall = statistics.median(r["wall_s"] for r in rows[0]["plan"])
        print(f"  prod plan under {PROD_PLAN_TARGET_S:g} s: {prod_wall:.2f} s wall (median)")
    largest = rows[-1]
    if "policy_s" in largest["record"]:
        plan_wall = statistics.median(r["wall_s"] for r in largest["plan"])
        plan_cpu = statistics.median(r["cpu_s"] for r in largest["plan"])
        policy_wall, policy_cpu = largest["record"]["policy_s"], largest["record"]["policy_cpu_s"]
        failed = ", ".join(largest["record"]["policy_failed"]) or "none"
        print(f"  {largest['gpus']:,} GPUs plan + policy pack under {LARGEST_WITH_POLICY_TARGET_S:g} s: "
              f"{plan_wall:.2f} + {policy_wall:.2f} = {plan_wall + policy_wall:.2f} s wall; CPU {plan_cpu:.2f} + "
              f"{policy_cpu:.2f} (runner and pack) = {plan_cpu + policy_cpu:.2f} s (policies failed: {failed})")
    if args.e2e_samples:
        e2e = [end_to_end(gpus, args.e2e_samples if gpus <= E2E_LARGE_GPUS else args.e2e_large_samples)
               for gpus in sizes]
        print_end_to_end([row for row in e2e if row["charts"]], rows)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        sys.path.insert(0, str(REPO))
        print(json.dumps(measure(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))))
    else:
        main()
