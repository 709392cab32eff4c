"""The plan's tables on the console: the summary of what the stack deploys, and the generated files' verdicts from
their real consumers."""

from pathlib import Path

from rich.markup import escape
from rich.table import Table

from runbooks.console import out
from runbooks.plan import plan as planning
from runbooks.plan.consumers import run_checks


def consumers_accept(out_dir: Path) -> bool:
    """Run the generated configuration past its real consumers; a rejected file is our bug (exit 1)."""
    outcomes = run_checks(out_dir)
    table = Table("file", "consumer", "result", title="Generated configuration, judged by its consumers")
    colour = {"passed": "green", "failed": "red", "skipped": "yellow"}
    for outcome in outcomes:
        table.add_row(outcome.check.artifact, outcome.check.consumer,
                      f"[{colour[outcome.status]}]{outcome.status}[/] {escape(outcome.detail)}")
    out.print(table)
    return all(o.status != "failed" for o in outcomes)


def _cap(quota: int, guaranteed: int) -> str:
    return f"{quota} ({guaranteed} guaranteed)" if guaranteed else str(quota)


def print_summary(summary: planning.Summary, out_dir: Path | None) -> None:
    out.print(
        f"[bold]stack {summary.stack}[/]: {summary.gpus} GPUs on {summary.nodes} nodes in "
        f"{len(summary.racks)} racks; stage {summary.stage} onboards "
        f"{len(summary.teams_onboarded)} of {summary.teams_total} teams"
        + (f" ({', '.join(summary.teams_onboarded)})" if summary.teams_onboarded else
           ": the platform alone, for the acceptance campaign (docs/rollout.md)")
    )
    groups = Table("node group", "pool", "GPU model", "nodes", "GPUs", title="GPUs by node group")
    for g in summary.groups:
        groups.add_row(g.node_group, g.pool, g.gpu_model, str(g.nodes), str(g.gpus))
    out.print(groups)
    racks = Table(
        "rack", "room", "nodes", "GPUs", "IT load / usable kW", "cooling", "headroom kW power / cooling",
        "feed A / B kW", "checks", title="Racks: power and cooling",
    )
    for r in summary.racks:
        racks.add_row(
            r.rack, r.room, str(r.nodes), str(r.gpus), f"{r.it_load_kw:.1f} / {r.usable_kw:.1f}",
            f"{r.cooling_type} {r.cooling_capacity_kw:g} kW",
            f"{r.power_headroom_kw:.1f} / {r.cooling_headroom_kw:.1f}",
            " / ".join(f"{kw:.1f}" for kw in r.feed_capacity_kw.values()),
            "[green]ok[/]" if not r.failed_checks else f"[red]{', '.join(r.failed_checks)}[/]",
        )
    out.print(racks)
    tiers = summary.storage
    storage = Table("tier", "StorageClasses", "size", "lifecycle", title="Storage tiers")
    storage.add_row("local NVMe", tiers["nvme"]["storage_class"], f"{tiers['nvme']['cache_gib']:g} GiB per GPU node",
                    f"prefetch {len(tiers['nvme']['prefetch'])} models to {tiers['nvme']['cache_path']}")
    storage.add_row("NFS hot", ", ".join(tiers["nfs_hot"]["storage_classes"]),
                    f"{tiers['nfs_hot']['capacity_tib']:g} TiB on {len(tiers['nfs_hot']['servers'])} servers",
                    f"newest {tiers['nfs_hot']['keep_checkpoints']:g} checkpoints per run")
    storage.add_row("Ceph cold", tiers["ceph_cold"]["storage_class"], f"{tiers['ceph_cold']['capacity_tib']:g} TiB",
                    f"mover `{tiers['ceph_cold']['mover_schedule']}`, older than "
                    f"{tiers['ceph_cold']['archive_after_days']:g} days")
    out.print(storage)
    flavors = list(dict.fromkeys(f for t in summary.teams for f in t.gpu_quota))
    teams = Table("team", "stage", *flavors, "total", "NFS class", "Slurm default QoS", "fairshare",
                  title=f"Teams onboarded at stage {summary.stage}: GPU quota per Kueue flavor, and in total")
    for t in summary.teams:
        teams.add_row(t.team, t.stage, *(_cap(t.gpu_quota.get(f, 0), t.gpu_guaranteed.get(f, 0)) for f in flavors),
                      str(t.gpu_total), t.storage_class, t.slurm_default_qos, str(t.fairshare))
    if summary.teams:
        out.print(teams)
    for shared in sorted({(t.local_queue, ", ".join(t.slurm_qos)) for t in summary.teams}):
        out.print(f"each team: Slurm QoS {shared[1]}; Kueue LocalQueue {shared[0]} -> ClusterQueue team-<team>, "
                  "which holds the team to these quotas", highlight=False)
    lendable = ", ".join(f"{f} {int(n)}" for f, n in summary.scheduling["lendable_gpus"].items())
    out.print(f"GPUs the pools lend to team queues now: {lendable}", highlight=False)
    inference = summary.inference
    models = Table("model", "served by", "replicas x GPUs", "USD / M prompt tokens", "USD / M completion tokens",
                   title=f"LLM gateway {inference['gateway_url']}: every team's LLM traffic, metered per team")
    for m in inference["models"]:
        models.add_row(m["name"], m["serves"], m["replicas"], f"{m['prompt_usd_per_mtok']:.4g}",
                       f"{m['completion_usd_per_mtok']:.4g}")
    out.print(models)
    budgets = ", ".join(f"{team} {usd:g}" for team, usd in inference["budgets"].items())
    out.print(f"gateway budgets in USD per {inference['budget_days']:g} days: {budgets}", highlight=False)
    classes = Table("PriorityClass", "value", "preemption", "default", title="Preemption: Kubernetes classes")
    for pc in summary.scheduling["priority_classes"]:
        default = "yes" if pc["global_default"] else ""
        classes.add_row(pc["name"], f"{int(pc['value']):,}", pc["preemption_policy"], default)
    out.print(classes)
    qos = Table("Slurm QoS", "priority", "preempts", title="Preemption: Slurm QoS (same table, same order)")
    for q in summary.slurm_qos:
        qos.add_row(q["name"], f"{int(q['priority']):,}", ", ".join(q["preempt"]) or "-")
    out.print(qos)
    policies = Table("policy", "level", "result", title="Policy pack")
    for policy in summary.policies:
        verdict = ("[green]pass[/]" if policy.passed else f"[red]{len(policy.violations)} violation(s)[/]")
        if policy.not_applicable:
            verdict = "not applicable"
        policies.add_row(policy.name, policy.enforcement_level, verdict)
    out.print(policies)
    for policy in summary.policies:
        for finding in policy.violations:
            where = f" [{finding.urn}]" if finding.urn else ""
            out.print(f"  {policy.name} ({finding.enforcement_level}): {escape(finding.message + where)}",
                      highlight=False)
    resources = Table("type", "count", title="Resources by type")
    for type_, count in summary.resources_by_type.items():
        resources.add_row(type_, str(count))
    out.print(resources)
    if out_dir is not None:
        out.print(f"wrote {len(summary.files)} files to {out_dir}")
