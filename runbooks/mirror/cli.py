"""`gpuctl mirror`: make the bundle an air-gapped site carries across the gap, and check it on arrival."""

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from runbooks.console import err, out
from runbooks.exit_codes import ExitCode
from runbooks.failures import Ending, exit_on_failure
from runbooks.mirror.bundle import BundleError, check_bundle, manifest_digest, write_bundle
from runbooks.options import StackOption, find_project_dir
from runbooks.plan import helm
from runbooks.plan import plan as planning
from runbooks.plan.cli import render_charts

app = typer.Typer(no_args_is_help=True, help="The bundle an air-gapped site carries: make it, check it.")


@app.command()
def bundle(
    out_dir: Annotated[Path, typer.Option("--out", help="A new or empty folder for the bundle.")],
    stack: StackOption = "prod",
    project_dir: Annotated[
        Path | None, typer.Option(help="Directory holding Pulumi.yaml; default: found from the working directory.")
    ] = None,
    chart_mirror: Annotated[
        Path | None, typer.Option(help="Folder of pinned chart archives, for the charts the site's mirror.charts does "
                                       "not hold.")
    ] = None,
    artifacts: Annotated[
        Path, typer.Option(help="Folder holding slurm.containers' packages (`make artifacts` builds them there).")
    ] = Path("build/artifacts"),
    plain_http: Annotated[bool, typer.Option(help="The OCI chart mirror speaks HTTP without TLS (a test registry).")]
    = False,
) -> None:
    """Render the stack (as `gpuctl plan --out` does) and write what the site needs from outside: the chart archives,
    the images it pulls, Slurm's host artifacts, the prefetched models' list, and SHA256SUMS."""
    project = project_dir or find_project_dir(Path.cwd())
    with exit_on_failure({OSError: Ending(ExitCode.INVALID)}, stack), err.status("rendering the stack") as status:
        site, graph = planning.run(project, stack, progress=lambda step: status.update(step))
        charts = render_charts(site, graph, chart_mirror, plain_http)
    if charts.skipped:
        err.print(f"[red]error:[/] the charts were not rendered: {escape(charts.skipped)}")
        raise typer.Exit(ExitCode.INVALID)
    if charts.error:
        err.print(f"[red]error:[/] {escape(charts.error)}")
        raise typer.Exit(ExitCode.FAILED)
    helm_binary = helm.find_helm()
    assert helm_binary is not None  # the charts were rendered with it
    with exit_on_failure({BundleError: Ending(ExitCode.INVALID), helm.HelmError: Ending(ExitCode.INVALID)}):
        written = write_bundle(out_dir, site, graph, charts.images, chart_mirror,
                               helm.ChartSource(site.mirror.charts, plain_http), helm_binary, artifacts)
    out.print(f"wrote {len(written)} files to {out_dir}: {len(charts.releases)} releases' charts, "
              f"{len(charts.images)} images listed, Slurm's host artifacts, the prefetched models' list")
    out.print(f"manifest sha256 {manifest_digest(out_dir)}: check the bundle with `gpuctl mirror check {out_dir}` "
              "and compare this digest over another channel", highlight=False)


@app.command()
def check(bundle_dir: Annotated[Path, typer.Argument(help="The bundle's folder.")]) -> None:
    """Verify a bundle against its manifest: every file listed is there with its sha256, and nothing else is."""
    if not bundle_dir.is_dir():
        err.print(f"[red]error:[/] {escape(str(bundle_dir))} is not a folder")
        raise typer.Exit(ExitCode.INVALID)
    problems = check_bundle(bundle_dir)
    for problem in problems:
        err.print(f"  {escape(problem.path)}: {escape(problem.reason)}", highlight=False)
    if problems:
        err.print(f"[red]the bundle does not match its manifest[/] ({len(problems)} file(s))")
        raise typer.Exit(ExitCode.INVALID)
    out.print(f"bundle {bundle_dir} matches its manifest (sha256 {manifest_digest(bundle_dir)})", highlight=False)
