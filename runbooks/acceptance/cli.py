"""`gpuctl acceptance`: plan, run (resumable), status, report.

Exit codes (runbooks.exit_codes.ExitCode): 0 done (run: the campaign passed); 1 a command or daemon failed; 2 the
input is wrong (spec, targets file, a missing SOP or drill module) or another run holds the campaign's lock; 4 the
campaign ended failed. Secrets come from the environment: GPUCTL_ACCEPTANCE_KEY (the gateway key the inference load
uses), GPUCTL_AUDIT_KEY (the audit logs' key; else the file GPUCTL_AUDIT_KEY_FILE names, default
/etc/gpucluster/audit.key, shared with `gpuctl rollout`, whose gate reads the passed campaign from its audit log). The
BMC password stays in its root-only file.
"""

import os
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.markup import escape

from components.monitoring.alerts import lending_stale_s
from components.scheduling.preemption import team_qos
from components.site.acceptance import DrillKind, PeakSource
from components.site.site import Pool, Site
from components.site.wellknown import PLATFORM_ACCOUNT
from runbooks.acceptance.alerts import firing_alerts
from runbooks.acceptance.campaign import CampaignRefusedError, CampaignRunner, Load, terminated_as_exit
from runbooks.acceptance.faults import FaultError, Switches
from runbooks.acceptance.lending import ControllerSampler, http_text
from runbooks.acceptance.load import (
    Checkpoints,
    FlexTraining,
    NodeTier,
    PrometheusSampler,
    QueueWaitSampler,
    TrainingJob,
    inference_load,
    job_states,
    storage_load,
    training_load,
)
from runbooks.acceptance.peak import measured_peak
from runbooks.acceptance.registry import RegistryError, Scene, shipped
from runbooks.acceptance.report import criterion_lines, drill_lines, write_report
from runbooks.acceptance.store import PASSED, CampaignStore
from runbooks.acceptance.targets import KEY_ENV, TargetsError, drill_targets, hot_dir, read_targets, ssh_to
from runbooks.console import err, out
from runbooks.exit_codes import ExitCode
from runbooks.failures import Ending, Endings, exit_on_failure
from runbooks.flex.lending import flex_nodes
from runbooks.options import ProjectDirOption, StackContext, StackOption
from runbooks.stack import deploy
from runbooks.stack.audit import AuditChainBrokenError, AuditKeyError, AuditLog, audit_key
from runbooks.stack.deploy import StackDeployer
from runbooks.stack.lock import StackLock

app = typer.Typer(no_args_is_help=True, help="The acceptance campaign: soak, 3x shock and failure drills.")
TargetsOption = Annotated[Path, typer.Option("--targets", help="Where the drills land and what the loads hit "
                                                               "(docs/acceptance.md).")]
MIB = 1 << 20
MAX_CHUNK = 64 * MIB
"""Bytes per checkpoint write: a dump is written in chunks of at most this (the load's memory bound)."""
GANG_NODES = 2


@app.callback()
def main(
    ctx: typer.Context,
    stack: StackOption = "prod",
    project_dir: ProjectDirOption = Path("."),
    state_dir: Annotated[Path | None, typer.Option(
        help="Campaign state (SQLite), failure log, switches and reports; default <project>/.gpuctl/acceptance-"
             "<stack>.")] = None,
    rollout_state_dir: Annotated[Path | None, typer.Option(
        help="The rollout's state dir, whose audit log records a passed campaign; default <project>/.gpuctl/"
             "rollout-<stack>.")] = None,
) -> None:
    """The acceptance campaign: soak, 3x shock and failure drills."""
    ctx.obj = StackContext(project_dir, stack, {"acceptance": state_dir, "rollout": rollout_state_dir})


ENDINGS: Endings = {
    AuditKeyError: Ending(ExitCode.INVALID),
    TargetsError: Ending(ExitCode.INVALID, what="targets"),
    RegistryError: Ending(ExitCode.INVALID),
    CampaignRefusedError: Ending(ExitCode.INVALID),
    FaultError: Ending(ExitCode.FAILED, hint="run again: the campaign resumes and reverts what is left"),
    AuditChainBrokenError: Ending(ExitCode.FAILED, what="the failure log is tampered"),
}
"""How each acceptance command ends on the errors it expects (runbooks/failures.py)."""


def _fail(message: str, code: ExitCode) -> typer.Exit:
    err.print(f"[red]error:[/] {escape(message)}")
    return typer.Exit(code)


def _targets(path: Path) -> dict[str, Any]:
    unreadable = Ending(ExitCode.INVALID, what=f"cannot read the targets file {path}")
    with exit_on_failure({OSError: unreadable, yaml.YAMLError: unreadable}):
        loaded = yaml.safe_load(path.read_text())
    if not isinstance(loaded, dict):
        raise _fail(f"{path}: must be a mapping of drill -> target", ExitCode.INVALID)
    return loaded


def _logs(context: StackContext) -> tuple[AuditLog, AuditLog]:
    key = audit_key(context.state_dir("rollout"))
    return (AuditLog(context.state_dir("acceptance") / "failures.jsonl", key),
            AuditLog(context.state_dir("rollout") / "audit.jsonl", key))


def build(site: Site, context: StackContext, targets: dict[str, Any], environ: dict[str, str]) -> CampaignRunner:
    """The campaign over the targets file's nodes and loads, at the measured (or declared) peak."""
    spec = site.acceptance
    state_dir = context.state_dir("acceptance")
    sop_dir = context.project_dir / "docs" / "sop"
    kinds = shipped(sop_dir)
    read = read_targets(site, spec.drills, targets, kinds)
    directory = hot_dir(targets)
    loads_at = targets.get("loads") or {}
    key = environ.get(KEY_ENV)
    if not key:
        raise _fail(f"{KEY_ENV} is not set: the inference load needs a gateway key", ExitCode.INVALID)
    peak, source = spec.peak, "declared"
    if spec.peak_source == PeakSource.PROMETHEUS:
        with exit_on_failure({OSError: Ending(ExitCode.FAILED,
                                              what=f"cannot measure the peak from {site.rollout.prometheus_url}")}):
            found = measured_peak(site.rollout.prometheus_url, spec.peak_window_days, spec.peak)
        if found is not None:
            peak, source = found, f"prometheus, {spec.peak_window_days} days"
    # Written and read back on the node the storage-jitter drill delays, through its mount of the hot tier: the jitter
    # is on the measured path (from this host it never was).
    jitter = kinds[DrillKind.STORAGE_JITTER].node(read[DrillKind.STORAGE_JITTER])
    tier = NodeTier.shell(ssh_to(site, jitter or ""), directory)
    checkpoint = max(int(spec.checkpoint_gib * (1 << 30) * spec.time_scale), MIB)
    chunk = min(checkpoint, MAX_CHUNK)
    checkpoints = Checkpoints(window=-(-checkpoint // chunk))  # the tier keeps one dump's chunks, as a run its newest
    inference = inference_load(str(loads_at.get("gateway_url")), key, str(loads_at.get("model")), peak.inference_rps,
                               spec.max_inference_rps)
    storage = storage_load(tier, chunk, peak.storage_write_mib_s, spec.max_storage_write_mib_s, checkpoints)
    # The platform account: it exists before any team is onboarded, and has the teams' QoS (docs/acceptance.md).
    # Its checkpoints go where the storage load writes, the hot tier as every node mounts it, each a whole dump.
    job = TrainingJob.for_site(site, max(spec.scaled(3600), 10), directory, checkpoint)
    training = training_load(("sbatch",), {}, [PLATFORM_ACCOUNT], team_qos(site), job, GANG_NODES,
                             peak.training_jobs_per_h, spec.max_training_jobs)
    # Preemptible training on every flex node throughout: what the lend at the shock's peak requeues (a site with no
    # flex pool lends nothing, and its verdict's `training yields to inference` says so).
    flex: list[Load] = [FlexTraining(("sbatch",), ("squeue",), {}, PLATFORM_ACCOUNT, site.slurm.flex_qos[0],
                                     TrainingJob.for_site(site, job.seconds, directory, checkpoint, Pool.FLEX),
                                     flex_nodes(site), spec.max_training_jobs)] if flex_nodes(site) else []
    # Each drill placed by its module (runbooks/acceptance/drills/), its probe reading these loads.
    scene = Scene(site, state_dir / "switches", inference, storage, tier, checkpoints)
    placed = drill_targets(spec.drills, read, kinds, scene)
    loads: list[Load] = [inference, storage, training, *flex,
                         PrometheusSampler("gpu_util_pct", site.rollout.prometheus_url,
                                           "avg(gpu:dcgm_gpu_util:max)"),
                         QueueWaitSampler(("squeue",), {}), _lending_controller(site)]
    log, rollout_log = _logs(context)
    return CampaignRunner(spec, CampaignStore(state_dir / "acceptance.sqlite"), log, rollout_log,
                   Switches(state_dir / "switches"), sop_dir,
                   lambda: firing_alerts(spec.alertmanager_url), placed, loads,
                   StackLock(state_dir / f"{context.stack}.lock", "gpuctl acceptance"),
                   job_states(("sacct",), {}), (peak, source))


def _lending_controller(site: Site) -> ControllerSampler:
    """The deployed lending controller's /metrics, where its unit binds them (lending.metrics_address: loopback by
    default, so the campaign then runs on the Slurm controller; the address Prometheus scrapes otherwise)."""
    lending = site.lending
    host = f"[{lending.metrics_address}]" if ":" in lending.metrics_address else lending.metrics_address
    url = f"http://{host}:{lending.metrics_port}/metrics"
    return ControllerSampler(url, lending_stale_s(lending), http_text(url), tuple(flex_nodes(site)))


@app.command()
@exit_on_failure(ENDINGS)
def plan(ctx: typer.Context, targets: TargetsOption) -> None:
    """The campaign's steps with their scaled durations, deadlines and SOPs; refuses a drill without its SOP."""
    context: StackContext = ctx.obj
    site = context.site
    runner = build(site, context, _targets(targets), {**os.environ, KEY_ENV: os.environ.get(KEY_ENV) or "unused"})
    steps = runner.plan()
    peak, source = runner.peak
    out.print(f"campaign at time scale {site.acceptance.time_scale:g}; peak ({source}): "
              f"{peak.inference_rps:g} requests/s, {peak.training_jobs_per_h:g} jobs/h, "
              f"{peak.storage_write_mib_s:g} MiB/s; shock x{site.acceptance.shock_factor:g}", highlight=False)
    for name, seconds, what in steps:
        out.print(f"  {name:<26} {seconds:>10.1f} s  {escape(what)}", highlight=False)


@app.command()
@exit_on_failure(ENDINGS)
def run(ctx: typer.Context, targets: TargetsOption) -> None:
    """Run the campaign, or resume it: faults a dead run left are reverted first; a passed one unblocks the rollout."""
    context: StackContext = ctx.obj
    site = context.site
    runner = build(site, context, _targets(targets), dict(os.environ))
    try:
        deployer = StackDeployer.open(context.project_dir, context.stack, site.rollout.policy_pack,
                                      deploy.pulumi_command())
        deployment = deployer.deployment_digest()
    except FileNotFoundError:
        raise _fail("the Pulumi CLI (`pulumi`) is not on PATH: the campaign is bound to the deployed stack it reads",
                    ExitCode.INVALID) from None
    if deployment is None:
        raise _fail("the stack has no successful update: deploy before accepting it", ExitCode.INVALID)
    with terminated_as_exit():
        campaign = runner.run(deployment, site.stage)
    report = write_report(runner.store, campaign, context.state_dir("acceptance") / "reports" / campaign.id)
    for line in criterion_lines(runner.store, campaign):
        out.print(f"  {escape(line)}", highlight=False)
    out.print(f"{campaign.id}: {campaign.verdict}: {escape(campaign.reason or '')}; report {report}", highlight=False)
    if campaign.verdict != PASSED:
        raise typer.Exit(ExitCode.ENDED)


def _store(context: StackContext) -> CampaignStore:
    state_dir = context.state_dir("acceptance")
    if not (state_dir / "acceptance.sqlite").exists():
        raise _fail(f"no campaign state in {state_dir}: run `gpuctl acceptance run` first", ExitCode.INVALID)
    return CampaignStore(state_dir / "acceptance.sqlite")


@app.command()
@exit_on_failure(ENDINGS)
def status(ctx: typer.Context) -> None:
    """The latest campaign: its steps, the faults still in place, what was logged, and whether its log verifies."""
    context: StackContext = ctx.obj
    store = _store(context)
    campaigns = store.campaigns()
    if not campaigns:
        raise _fail("no campaign yet", ExitCode.INVALID)
    campaign = campaigns[-1]
    out.print(f"{campaign.id}: {campaign.state} (deployment {campaign.deployment}, stage {campaign.stage}, time "
              f"scale {campaign.time_scale:g}){': ' + escape(campaign.reason) if campaign.reason else ''}",
              highlight=False)
    for name, (_, finished, _) in store.steps(campaign.id).items():
        out.print(f"  {name:<26} {'done' if finished else 'started'}", highlight=False)
    for line in [*criterion_lines(store, campaign), *drill_lines(store, campaign)]:
        out.print(f"  {escape(line)}", highlight=False)
    for fault in store.faults(campaign.id, in_place_only=True):
        out.print(f"  [yellow]in place[/] {fault.drill} on {escape(fault.fault['where'])}, switch {fault.armed} "
                  "(`gpuctl acceptance run` reverts it first)", highlight=False)
    failures = store.failures(campaign.id)
    out.print(f"  failures logged: {len(failures)}, {sum(f.sop is None for f in failures)} without an SOP",
              highlight=False)
    log, _ = _logs(context)
    out.print(f"  log: {log.verify().records} records, keyed chain intact", highlight=False)


@app.command()
@exit_on_failure(ENDINGS)
def report(
    ctx: typer.Context,
    campaign_id: Annotated[str | None, typer.Option("--campaign", help="Default: the latest.")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Default: <state-dir>/reports/<campaign>.")] = None,
) -> None:
    """Write the campaign's report: a verdict line per drill, every failure with its SOP, and the plots."""
    context: StackContext = ctx.obj
    store = _store(context)
    campaigns = store.campaigns()
    campaign = next((c for c in reversed(campaigns) if campaign_id in (None, c.id)), None)
    if campaign is None:
        raise _fail(f"no campaign {campaign_id or ''} in {context.state_dir('acceptance')}".replace("  ", " "),
                    ExitCode.INVALID)
    path = write_report(store, campaign, out_dir or context.state_dir("acceptance") / "reports" / campaign.id)
    out.print(f"{campaign.id}: {(campaign.verdict or campaign.state)}; report {path}", highlight=False)
