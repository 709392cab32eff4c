"""Benchmark the offline plan against the engine's floor.

Measures what `gpuctl plan` does minus printing (parse_site, then run_program under the offline
engine) for the prod site (Pulumi.prod.yaml) and for generated sites of 1,024 and 8,192 A800 GPUs,
and two floors under the same engine, each registering as many ComponentResources nested as deep
as GpuCluster > Facility > Rack > GpuNode: a bare one (the SDK's own floor) and a payload one whose
resources carry as many props and outputs as a GpuNode (what the SDK costs for that payload).
Each run is a child process of its own, so its wall time (taken by the child around the run;
start-up, imports and config excluded) and its peak RSS (ru_maxrss from os.wait4) are that run's alone.

Run from the repo root: `make bench` or `.venv/bin/python benchmarks/plan_bench.py`.
Targets, printed and not asserted: prod plan under 5 s; cost linear in GPUs; plan/floor at most 1.5.
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runbooks.offline.engine import StackConfig

REPO = Path(__file__).resolve().parent.parent
PROJECT = "gpu-cluster"
SITES = ("prod", "1024", "8192")
NODES_PER_RACK = 4
"""8 x A800 draw ~6.49 kW a node, so 4 fit a 40 kW rack (components/facility/power.py)."""
GPU_NODE_FACTS = 7
"""Props (and outputs) a GpuNode carries (components/facility/component.py): the payload floor carries as many."""
PROD_PLAN_TARGET_S = 5.0
FLOOR_RATIO_TARGET = 1.5

FLOOR_PROGRAM = """\
import pulumi


config = pulumi.Config()
# The bare floor carries nothing; the payload floor as many facts as a GpuNode, as props and outputs.
FACTS = {f"fact_{i}": float(i) for i in range(config.require_int("facts"))}


class Trivial(pulumi.ComponentResource):
    def __init__(self, name, parent=None):
        super().__init__("bench:floor:Trivial", name, FACTS or None, pulumi.ResourceOptions(parent=parent))
        if FACTS:
            self.register_outputs(FACTS)


# As deep as the plan: root > facility > (rack > nodes_per_rack nodes)...; count excludes the Stack.
count, rack_size = config.require_int("count"), 1 + config.require_int("nodes_per_rack")
facility = Trivial("facility", Trivial("root"))
for i in range(count - 2):
    if i % rack_size == 0:
        rack = Trivial(f"rack-{i}", facility)
    else:
        Trivial(f"node-{i}", rack)
"""


def generated_site(prod: "StackConfig", gpus: int) -> "StackConfig":
    """The prod config with its racks and node groups replaced by `gpus` A800s, 4 nodes to a prod-like rack."""
    rack_template = json.loads(prod.values[f"{PROJECT}:racks"])[0]  # a01: 40 kW, in-row 40 kW, PDUs on A and B
    group_template = json.loads(prod.values[f"{PROJECT}:node_groups"])[0]  # a800-train: 8 x A800, Slurm
    nodes = gpus // group_template["gpus_per_node"]
    rack_names = [f"a{r + 1:03d}" for r in range(-(-nodes // NODES_PER_RACK))]
    racks = [
        {**rack_template, "name": rack,
         "pdus": [{**pdu, "name": f"{rack}-pdu-{pdu['feed'].lower()}"} for pdu in rack_template["pdus"]]}
        for rack in rack_names
    ]
    group = {**group_template, "nodes": [
        {"name": f"gpu-a800-{n + 1:04d}", "rack": rack_names[n // NODES_PER_RACK],
         "ssh_host": f"10.20.{1 + n // 250}.{1 + n % 250}", "bmc_host": f"10.20.{101 + n // 250}.{1 + n % 250}"}
        for n in range(nodes)
    ]}
    values = {**prod.values, f"{PROJECT}:racks": json.dumps(racks), f"{PROJECT}:node_groups": json.dumps([group])}
    return replace(prod, values=values)


def measure(kind: str, arg: str) -> dict[str, Any]:
    """In the child: one plan (arg: a site) or one floor (arg: "resources/facts"), timed apart from imports."""
    started = perf_counter()
    import components.cluster  # noqa: F401 (what __main__.py imports: loaded before the clock, as for the floor)
    from components.validate import parse_site
    from runbooks.offline.engine import StackConfig, load_stack_config, run_program
    imports_s, imports_mib = perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if kind == "plan":
        prod = load_stack_config(REPO, "prod")
        config = prod if arg == "prod" else generated_site(prod, int(arg))
        started = perf_counter()
        parse_site(*config.project_values())
        graph = run_program(REPO, f"bench-{arg}", config)
    else:
        count, facts = arg.split("/")
        values = {f"{PROJECT}:count": str(int(count) - 1), f"{PROJECT}:nodes_per_rack": str(NODES_PER_RACK),
                  f"{PROJECT}:facts": facts}
        with tempfile.TemporaryDirectory(prefix="floor-") as project:
            (Path(project) / "Pulumi.yaml").write_text(f"name: {PROJECT}\nruntime: python\n")
            (Path(project) / "__main__.py").write_text(FLOOR_PROGRAM)
            started = perf_counter()
            graph = run_program(Path(project), "floor", StackConfig(PROJECT, values, frozenset()))
    seconds = perf_counter() - started
    return {"resources": len(graph.resources), "gpus": int(graph.stack_outputs.get("gpu_count", 0)), "seconds": seconds,
            "imports_s": imports_s, "imports_mib": imports_mib}


def run_child(kind: str, arg: str) -> dict[str, Any]:
    """One run in a fresh interpreter; its peak RSS comes from wait4, its figures from its JSON line."""
    child = subprocess.Popen([sys.executable, __file__, "--one", kind, arg], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    line = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{kind} {arg} failed with exit code {child.returncode}")
    return {**json.loads(line), "mib": usage.ru_maxrss / 1024}


def main() -> None:
    rows = []
    for site in SITES:
        print(f"running {site if site == 'prod' else site + '-GPU'} plan...", file=sys.stderr, flush=True)
        plan = run_child("plan", site)
        print(f"running floors of {plan['resources']} resources...", file=sys.stderr, flush=True)
        floor = run_child("floor", f"{plan['resources']}/0")
        payload = run_child("floor", f"{plan['resources']}/{GPU_NODE_FACTS}")
        assert floor["resources"] == payload["resources"] == plan["resources"], (floor, payload, plan)
        rows.append((site, plan["gpus"], plan, floor, payload))

    imports = rows[0][2]
    print(f"imports (pulumi, engine, components): {imports['imports_s']:.2f} s, excluded from the times below; "
          f"{imports['imports_mib']:.1f} MiB, included in every peak RSS below\n")
    header = ("site", "GPUs", "resources", "plan s", "ms/GPU", "plan MiB", "floor s", "floor MiB", "time x", "mem x",
              "payload floor s", "time x payload")
    table = [header] + [
        (site, f"{gpus:,}", f"{plan['resources']:,}", f"{plan['seconds']:.3f}", f"{plan['seconds'] * 1000 / gpus:.2f}",
         f"{plan['mib']:.1f}", f"{floor['seconds']:.3f}", f"{floor['mib']:.1f}",
         f"{plan['seconds'] / floor['seconds']:.2f}", f"{plan['mib'] / floor['mib']:.2f}",
         f"{payload['seconds']:.3f}", f"{plan['seconds'] / payload['seconds']:.2f}")
        for site, gpus, plan, floor, payload in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for site, *figures in table:
        print("  ".join([site.ljust(widths[0]), *(f.rjust(w) for f, w in zip(figures, widths[1:], strict=True))]))

    prod_s = rows[0][2]["seconds"]
    per_gpu = [plan["seconds"] * 1000 / gpus for _, gpus, plan, _, _ in rows]
    worst_time = max(plan["seconds"] / floor["seconds"] for *_, plan, floor, _ in rows)
    worst_mem = max(plan["mib"] / floor["mib"] for *_, plan, floor, _ in rows)
    worst_payload = max(plan["seconds"] / payload["seconds"] for *_, plan, _, payload in rows)
    *_, plan, floor, _ = rows[-1]  # the largest site: the one whose memory growth is more than noise
    growth = (plan["mib"] - plan["imports_mib"]) / (floor["mib"] - floor["imports_mib"])
    print("\ntargets (not asserted):")
    print(f"  prod plan under {PROD_PLAN_TARGET_S:g} s: {prod_s:.3f} s")
    print(f"  cost linear in GPUs: ms/GPU {' -> '.join(f'{ms:.2f}' for ms in per_gpu)} "
          f"(8,192 vs 1,024 GPUs: x{per_gpu[2] / per_gpu[1]:.2f}; 1.00 is linear)")
    print(f"  plan/floor at most {FLOOR_RATIO_TARGET:g}: worst time x{worst_time:.2f}, worst memory x{worst_mem:.2f} "
          f"(8,192 GPUs, growth above the imports alone: x{growth:.2f})")
    print(f"  plan/payload floor (same {GPU_NODE_FACTS} props + outputs per resource): worst time x{worst_payload:.2f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(measure(*sys.argv[2:4])))
    else:
        main()
