"""gpuctl report: what the cluster did in a window against a baseline window, measured (docs/report.md)."""

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from runbooks.console import out
from runbooks.exit_codes import ExitCode
from runbooks.failures import Ending, Endings, exit_on_failure
from runbooks.options import ProjectDirOption, StackOption, site_or_exit
from runbooks.report.accounting import AccountingError, sacct_jobs
from runbooks.report.measure import measure
from runbooks.report.prometheus import Prometheus, PrometheusError
from runbooks.report.render import TEAM_COLUMNS, figure_rows, team_rows, write
from runbooks.report.window import ReportInputError, check_windows, parse_resolution, parse_window

WINDOW_HELP = "START..END, ISO 8601 times with a UTC offset, e.g. 2026-11-02T00:00Z..2026-11-09T00:00Z."
ENDINGS: Endings = {
    ReportInputError: Ending(ExitCode.INVALID),
    PrometheusError: Ending(ExitCode.FAILED),
    AccountingError: Ending(ExitCode.FAILED),
}
"""How `gpuctl report` ends on the errors it expects (runbooks/failures.py)."""


@exit_on_failure(ENDINGS)
def report(
    window: Annotated[str, typer.Option(help=f"The period to measure: {WINDOW_HELP}")],
    baseline: Annotated[str, typer.Option(help=f"The period to compare with, ending before --window starts: "
                                               f"{WINDOW_HELP}")],
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for report.md, report.json and the PNG "
                                                        "plots (created if missing; those files are replaced).")],
    stack: StackOption = "prod",
    project_dir: ProjectDirOption = Path("."),
    prometheus_url: Annotated[str | None, typer.Option(help="Prometheus' HTTP API; default: the site's "
                                                            "rollout.prometheus_url.")] = None,
    resolution: Annotated[str, typer.Option(help="Step of the DCGM, pod-request and gateway series: 30s, 5m, "
                                                 "1h... (at least twice the scrape interval).")] = "5m",
) -> None:
    """Measure GPU utilization and allocation, training queue wait, inference latency and errors, and adoption per
    team, for a window against a baseline; print the tables, write report.md, report.json and PNG plots to --out."""
    site = site_or_exit(project_dir, stack)
    now = datetime.now(UTC)
    measured = parse_window(window, "--window", now)
    before = parse_window(baseline, "--baseline", now)
    step_s = parse_resolution(resolution, "--resolution")
    check_windows(measured, before, step_s, "--resolution")
    if out_dir.exists() and not out_dir.is_dir():
        raise ReportInputError(f"--out: {out_dir} exists and is not a folder")

    prometheus = Prometheus(prometheus_url or site.rollout.prometheus_url)
    prometheus.instant("vector(1)", now)  # answers at all, before minutes of sacct
    jobs = sacct_jobs(before.start, measured.end)
    periods = (measure(prometheus, site, jobs, before, step_s, time.time()),
               measure(prometheus, site, jobs, measured, step_s, time.time()))

    table = Table("figure", "baseline", "window", "change", title=f"Stack {stack}: window {measured} against "
                                                                   f"baseline {before}")
    for row in figure_rows(*periods):
        table.add_row(*map(escape, row))  # "[%]" is a unit, not rich markup
    out.print(table)
    teams = Table(*TEAM_COLUMNS, title="Training by team (Slurm accounting), baseline -> window")
    for team_row in team_rows(*periods):
        teams.add_row(*map(escape, team_row))
    out.print(teams)

    out_dir.mkdir(parents=True, exist_ok=True)
    for path in write(out_dir, stack, *periods, step_s):
        out.print(f"wrote {escape(str(path))}")
