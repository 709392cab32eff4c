"""`gpuctl plan`: render the stack offline, judge it with the policy pack and the generated files with their
consumers, and print what the stack would be."""

import gc
import json
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from components.mirror.images import parse
from components.site.site import Site
from components.supplied import operator_supplied
from runbooks.console import err, out
from runbooks.exit_codes import ExitCode
from runbooks.failures import Ending, Endings, exit_on_failure
from runbooks.offline.engine import Resource, ResourceGraph
from runbooks.offline.policy_pack import PolicyConfigError, PolicyPackError
from runbooks.options import StackOption, find_project_dir
from runbooks.plan import converge, files, helm, report
from runbooks.plan import plan as planning
from runbooks.plan.images import ImageUse, images_pulled
from runbooks.plan.invariants import Invariant, check_invariants
from runbooks.plan.out_dir import OutDirError, PlanFolder
from runbooks.plan.producers import Deployed

READING: Endings = {
    OSError: Ending(ExitCode.INVALID),
    json.JSONDecodeError: Ending(ExitCode.INVALID),
    PolicyConfigError: Ending(ExitCode.INVALID),
    PolicyPackError: Ending(ExitCode.FAILED),
}
"""How `gpuctl plan` ends while it reads the stack, renders and judges it (runbooks/failures.py)."""


def plan(
    stack: StackOption = "prod",
    out_dir: Annotated[Path | None, typer.Option("--out", help="Write the rendered resources here.")] = None,
    project_dir: Annotated[
        Path | None, typer.Option(help="Directory holding Pulumi.yaml; default: found from the working directory.")
    ] = None,
    policy_pack_config: Annotated[
        Path | None, typer.Option(help="Policy config JSON, as `pulumi preview --policy-pack-config` takes it.")
    ] = None,
    chart_mirror: Annotated[
        Path | None, typer.Option(help="Folder of pinned chart archives (`helm pull`); with --out, every release is "
                                       "rendered from it by the real Helm and its objects validated.")
    ] = None,
    plain_http: Annotated[
        bool, typer.Option(help="The site's OCI chart mirror (mirror.charts) speaks HTTP without TLS, as a test "
                                "registry on loopback does (Helm's --plain-http; `pulumi up` needs TLS).")
    ] = False,
) -> None:
    """Render the stack offline (no cluster, no Pulumi CLI), judge it with the policy pack, summarize it."""
    if out_dir is None and (chart_mirror is not None or plain_http):
        # The charts are rendered into --out's helm/ folder: without it these options would do nothing.
        raise typer.BadParameter("needs --out DIR: the charts are rendered into DIR/helm/ and validated there",
                                 param_hint="'--chart-mirror'" if chart_mirror is not None else "'--plain-http'")
    project = project_dir or find_project_dir(Path.cwd())
    # The pack starts first: it loads its modules while the program runs.
    with exit_on_failure(READING, stack), planning.policy_pack(project, stack) as pack:
        policy_config = json.loads(policy_pack_config.read_text()) if policy_pack_config else None
        renders = _EarlyRenders(chart_mirror, plain_http) if out_dir is not None else None
        with err.status("planning") as status:
            try:
                site, graph = planning.run(project, stack, progress=lambda step: status.update(step),
                                           watch=renders.watch if renders else lambda _: None)
            except BaseException:
                if renders and renders.started:
                    renders.started.close()
                raise
            # The charts go on rendering while the policy pack judges (0.8 s of wall time on prod), on the cores it
            # leaves.
            rendering = _in_background(render_charts, site, graph, chart_mirror, plain_http,
                                       renders.started if renders else None) if out_dir is not None else None
            result = planning.judge(site, graph, project, policy_config, progress=lambda step: status.update(step),
                                    pack=pack)
    summary = planning.summarize(result)
    charts: ChartsOutcome | None = None
    if out_dir is not None:
        writing = {OutDirError: Ending(ExitCode.INVALID),
                   OSError: Ending(ExitCode.FAILED, what=f"cannot write the plan to {out_dir}")}
        with exit_on_failure(writing), PlanFolder.claim(out_dir) as folder:
            summary.files = files.write_plan(result.site, result.graph, folder)
            assert rendering is not None  # started with --out
            with err.status("rendering the Helm releases"):
                charts = rendering.result()
            if not (charts.skipped or charts.error):
                summary.files += helm.write(charts.releases, charts.streams, folder)
            folder.record(summary.files)
    report.print_summary(summary, out_dir)
    out.print(f"policy pack: {len(summary.policies)} policies judged {len(result.graph.resources)} resources "
              f"in {result.policy_seconds:.2f} s")
    if out_dir is not None and not report.consumers_accept(out_dir):
        raise typer.Exit(ExitCode.FAILED)
    if charts is not None and not _charts_valid(charts):
        raise typer.Exit(ExitCode.FAILED)
    broken = [i.name for i in charts.invariants if i.violations] if charts else []
    if result.blocking:
        err.print(f"[red]{len(result.blocking)} mandatory policy violation(s)[/]: `pulumi preview --policy-pack "
                  "policy` would stop here")
    if broken:
        err.print(f"[red]{len(broken)} broken invariant(s)[/]: {', '.join(broken)}", highlight=False)
    if result.blocking or broken:
        raise typer.Exit(ExitCode.HELD)


@dataclass
class ChartsOutcome:
    releases: list[helm.RenderedRelease] = field(default_factory=list)
    invalid: list[helm.Invalid] = field(default_factory=list)
    invariants: list[Invariant] = field(default_factory=list)
    streams: list[str] = field(default_factory=list)
    """Each release's objects as helm/<release>.yaml holds them."""
    images: dict[str, list[ImageUse]] = field(default_factory=dict)
    """Every image the stack pulls, by its source reference, with the objects that name it."""
    image_mirror: str | None = None
    skipped: str = ""
    """Why nothing was rendered (no mirror, no helm); never reported as passed."""
    error: str = ""
    """Why rendering failed: a chart missing from the mirror, Helm failing."""


@dataclass
class _EarlyRenders:
    """Each release's `helm template` started as the program registers it, on the core the program leaves idle (the
    program runs on one), where render_charts would render the charts."""

    mirror: Path | None
    plain_http: bool
    started: helm.Renders | None = None

    def watch(self, site: Site) -> Callable[[Resource], None] | None:
        helm_binary = helm.find_helm()
        if helm_binary is None or (self.mirror is None and site.mirror.charts is None):
            return None
        self.started = helm.Renders(self.mirror, site.kubernetes_version, helm_binary,
                                    helm.ChartSource(site.mirror.charts, self.plain_http))
        return self.started.start


def _in_background(work: Callable[..., ChartsOutcome], *args: Any) -> Future[ChartsOutcome]:
    """work(*args), started in a thread of its own; the process waits for it at exit."""
    thread = ThreadPoolExecutor(1)
    started = thread.submit(work, *args)
    thread.shutdown(wait=False)
    return started


def render_charts(site: Site, graph: ResourceGraph, mirror: Path | None, plain_http: bool = False,
                  renders: helm.Renders | None = None) -> ChartsOutcome:
    """The releases rendered (by renders, where they were started as the program registered them), validated, and
    the invariants over them."""
    helm_binary = helm.find_helm()
    if mirror is None and site.mirror.charts is None:
        return ChartsOutcome(skipped="no --chart-mirror given and no mirror.charts in the spec")
    if helm_binary is None:
        return ChartsOutcome(skipped="helm is not installed (`make plan` installs it in .venv/bin)")
    try:
        releases = helm.render_releases(graph, mirror, site.kubernetes_version, helm_binary,
                                        helm.ChartSource(site.mirror.charts, plain_http), renders)
    except helm.HelmError as error:
        return ChartsOutcome(error=str(error))
    finally:
        if renders is not None:  # whatever render_releases did with them: their threads and scratch go now
            renders.close()
        helm.release_yaml_workers()  # the one render of the run is over
    streams = helm.streams(releases)  # helm/*.yaml's texts: strings, which the checks below cannot change
    # The releases' objects (no cycle among them) live to the end of the run: frozen, Python's cyclic collector stops
    # passing over them each time validation and the invariants make objects of their own, and at the exit's last
    # collection (which gc.unfreeze() after the checks brought back: 0.5-1 s of CPU). Prod, three pairs at load 2:
    # 6.33 -> 5.87 s of CPU, 4.87 -> 4.37 s wall (medians). What was garbage when it froze stays (the run ends soon).
    # gpuctl now freezes everything as a command ends (runbooks/gpuctl.py), which spares the exit alone.
    gc.freeze()
    by_urn = planning.kubernetes_objects(graph)
    registered = list(by_urn.values())
    deployed = Deployed([o for r in releases for o in r.objects] + registered, registered,
                        planning.host_installs(graph), converge.installs(graph, releases, by_urn),
                        operator_supplied(site), site.mirror.images)
    return ChartsOutcome(releases, helm.validate(releases, site.kubernetes_version), check_invariants(deployed),
                         streams, images_pulled(deployed.objects, site.mirror.images), site.mirror.images)


def _charts_valid(charts: ChartsOutcome) -> bool:
    """What each release renders to, judged by its schema; a rejected object is our bug (exit 1)."""
    if charts.skipped or charts.error:
        status = f"[yellow]skipped[/] {escape(charts.skipped)}" if charts.skipped else \
            f"[red]failed[/] {escape(charts.error)}"
        out.print(f"Helm releases: {status}", highlight=False)
        return not charts.error
    table = Table("release", "chart", "objects", "result", title="Helm releases, rendered by Helm and validated")
    # By name, not as the program registered them: that order changes from run to run, the table should not.
    for release in sorted(charts.releases, key=lambda r: (r.release, r.namespace)):
        bad = [i for i in charts.invalid if i.source == release.release]
        result = f"[red]{len(bad)} invalid[/]" if bad else "[green]valid[/]"
        table.add_row(release.release, release.chart, str(len(release.objects)), result)
    out.print(table)
    for invalid in sorted(charts.invalid, key=lambda i: (i.source, i.kind, i.name, i.reason)):
        out.print(f"  {invalid.source}: {invalid.kind} {invalid.name}: {escape(invalid.reason)}", highlight=False)
    count = sum(len(r.objects) for r in charts.releases)
    out.print(f"{count} rendered objects in {len(charts.releases)} releases, {len(charts.invalid)} invalid",
              highlight=False)
    _print_images(charts)
    checks = Table("invariant", "result", title="Invariants over the rendered stack")
    for invariant in charts.invariants:
        checks.add_row(invariant.name, f"[red]{len(invariant.violations)} violation(s)[/]"
                       if invariant.violations else "[green]holds[/]")
    out.print(checks)
    for invariant in charts.invariants:
        for violation in invariant.violations:
            out.print(f"  {invariant.name}: {escape(violation)}", highlight=False)
    return not charts.invalid


def _print_images(charts: ChartsOutcome) -> None:
    """Every image the stack pulls, with its tag (or digest), and from where when the site mirrors images."""
    where = f"pulled from the mirror {charts.image_mirror}" if charts.image_mirror else "pulled from their sources"
    table = Table("image", "tag", "digest", "named by", title=f"Images the stack pulls ({where})")
    for reference, uses in charts.images.items():
        image = parse(reference)
        objects = sorted({u.obj for u in uses})
        table.add_row(image.name, image.tag or "-", image.digest or "-",
                      objects[0] + (f" and {len(objects) - 1} more" if len(objects) > 1 else ""))
    out.print(table)

