"""Benchmark gpuctl simulate: wall time of 30 days of the Gavel traces on the prod site, and how it grows with the site.

Per size (128 GPUs is the prod site; 1,024 and 8,192 GPUs are copies of it, built as benchmarks/plan_bench.py builds
them, so the mix of Slurm, flex and Kubernetes nodes stays prod's), the trace is mapped at the default training load
(so jobs grow with the site) and both policies are simulated, each timed on its own; parsing the site and reading
the traces are timed apart. Every team is onboarded (the last stage), as gpuctl simulate does by default.

Then the overloaded case (issue 37): 30 days of Alibaba's pods at --training-load 2.0 on prod, both policies, where the
queues grow for the whole window and every event's scheduling pass meets thousands of waiting jobs.

Run from the repo root: `make bench` or `.venv/bin/python benchmarks/simulate_bench.py [--sizes 128,1024,8192]
[--overload-load 2.0]`. Targets, printed and not asserted: prod under 60 s for both policies together, on Gavel and
overloaded.
"""

import argparse
import sys
from pathlib import Path
from time import perf_counter, process_time

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from plan_bench import PROD_GPUS, generated_site  # noqa: E402 (the benchmark's sibling, on the path just set)

from components.validate import parse_site  # noqa: E402
from runbooks.offline.engine import load_stack_config  # noqa: E402
from runbooks.simulate.compare import at_stage, checkpoint_s  # noqa: E402
from runbooks.simulate.engine import Policy, simulate  # noqa: E402
from runbooks.simulate.results import figures  # noqa: E402
from runbooks.simulate.site_model import site_model, static_slices  # noqa: E402
from runbooks.simulate.traces import Trace  # noqa: E402
from runbooks.simulate.workload import Mapping, build  # noqa: E402

PROD_TARGET_S = 60.0
DAYS = 30.0
TRACES = REPO.parent / "shared" / "traces"


def bench(gpus: int, trace: Trace = Trace.GAVEL, load: float = Mapping.training_load) -> dict[str, float]:
    prod = load_stack_config(REPO, "prod")
    config = prod if gpus == PROD_GPUS else generated_site(prod, gpus)
    started, cpu = perf_counter(), process_time()
    site = at_stage(parse_site(*config.project_values()), None)
    model = site_model(site)
    workload = build(site, model.teams, TRACES, Mapping(trace, days=DAYS, training_load=load))
    slices = static_slices(model, site)
    row: dict[str, float] = {"gpus": model.gpus, "jobs": len(workload.jobs), "setup_s": perf_counter() - started}
    for policy in Policy:
        started = perf_counter()
        outcome = simulate(model, workload, policy, site.lending, checkpoint_s(site), slices)
        row[f"{policy}_s"] = perf_counter() - started
        row[f"{policy}_util"] = figures(outcome).utilization_pct
    # CPU seconds beside the wall: on a shared build machine the wall time is mostly other people's work.
    row["cpu_s"] = process_time() - cpu
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=f"{PROD_GPUS},1024,8192", help="GPUs per site, multiples of 128")
    parser.add_argument("--overload-load", type=float, default=2.0, help="overloaded case's training load; 0 skips it")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for gpus in sizes:
        print(f"simulating {DAYS:g} days of {Trace.GAVEL} on {gpus:,} GPUs...", file=sys.stderr, flush=True)
        rows.append(bench(gpus))
    header = ("GPUs", "jobs", "setup s", "static s", "stack s", "total s", "ms/job", "util static", "util stack")
    table = [header] + [
        (f"{r['gpus']:,.0f}", f"{r['jobs']:,.0f}", f"{r['setup_s']:.2f}", f"{r['static_s']:.2f}",
         f"{r['stack_s']:.2f}", f"{r['setup_s'] + r['static_s'] + r['stack_s']:.2f}",
         f"{1000 * (r['static_s'] + r['stack_s']) / r['jobs']:.2f}", f"{r['static_util']:.1f} %",
         f"{r['stack_util']:.1f} %")
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for line in table:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)))
    prod = rows[0]
    total = prod["setup_s"] + prod["static_s"] + prod["stack_s"]
    print(f"\ntarget (not asserted): {DAYS:g} days of {Trace.GAVEL} on {prod['gpus']:,.0f} GPUs under "
          f"{PROD_TARGET_S:g} s: {total:.2f} s")
    if len(rows) > 1:
        per_job = [(r["static_s"] + r["stack_s"]) / r["jobs"] for r in rows]
        print("growth: ms/job " + " -> ".join(f"{1000 * p:.2f}" for p in per_job)
              + f" (x{per_job[-1] / per_job[0]:.2f} from {rows[0]['gpus']:,.0f} to {rows[-1]['gpus']:,.0f} GPUs; "
              "1.00 is linear in jobs)")
    if args.overload_load > 0:
        print(f"simulating {DAYS:g} days of {Trace.ALIBABA} at --training-load {args.overload_load:g} on "
              f"{PROD_GPUS} GPUs...", file=sys.stderr, flush=True)
        over = bench(PROD_GPUS, Trace.ALIBABA, args.overload_load)
        total = over["setup_s"] + over["static_s"] + over["stack_s"]
        print(f"target (not asserted): {DAYS:g} days of {Trace.ALIBABA} at --training-load {args.overload_load:g} "
              f"({over['jobs']:,.0f} jobs) on {PROD_GPUS} GPUs under {PROD_TARGET_S:g} s: {total:.2f} s (setup "
              f"{over['setup_s']:.2f} s, static {over['static_s']:.2f} s, stack {over['stack_s']:.2f} s; "
              f"{over['cpu_s']:.2f} s of CPU)")


if __name__ == "__main__":
    main()
