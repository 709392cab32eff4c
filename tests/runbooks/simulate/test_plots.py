"""The plots as a person reads them, judged on the drawn figures: the run named above each, the two policies told
apart where their lines coincide, and every legend clear of the data."""

import pytest
from matplotlib.figure import Figure

from components.site.lending import Lending
from components.site.site import Pool
from runbooks.simulate.engine import Policy, simulate
from runbooks.simulate.plots import figures
from runbooks.simulate.site_model import SlurmNode, StaticSlices
from tests.runbooks.simulate.test_engine import FLAVOR, LEND_WORKLOAD, LENDING, small_site

RUN = ("gpuctl simulate --stack prod: philly-gavel, 30 days, 369 training jobs (x0.24 of the trace), training load "
       "offered 0.69 of the site's GPU-hours (--training-load 0.7), inference peak 1, seed 0, static slices by "
       "fairshare")
"""As long as cli.run_name makes it."""


@pytest.fixture(scope="module")
def drawn() -> list[Figure]:
    """The worked lend of test_engine: f1 lent at 1260 s, the first minutes of the window."""
    site = small_site([SlurmNode("s1", Pool.SLURM, "A800", 8), SlurmNode("f1", Pool.FLEX, "A800", 8)], 8)
    slices = StaticSlices({"a": 16, "b": 0}, {("a", FLAVOR): 0, ("b", FLAVOR): 0}, {FLAVOR: 8})
    outcomes = {policy: simulate(site, LEND_WORKLOAD, policy, LENDING if policy == Policy.STACK else Lending(), 600,
                                 slices) for policy in Policy}
    return figures(outcomes, RUN)


def test_each_plot_names_the_run_within_its_width(drawn: list[Figure]) -> None:
    """Wrapped: on one line the name set the image's width and left the axes a third of it."""
    for figure in drawn:
        assert " ".join(figure.get_suptitle().split()) == " ".join(RUN.split())
        renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
        title = next(t for t in figure.texts if t.get_text() == figure.get_suptitle())
        assert title.get_window_extent(renderer).width <= figure.bbox.width


def test_the_policies_differ_in_style_so_coinciding_lines_both_show(drawn: list[Figure]) -> None:
    for figure in drawn:
        for axes in figure.axes:
            lines = {str(line.get_label()): line for line in axes.get_lines()}
            static = next(v for k, v in lines.items() if "static" in k)
            stack = next(v for k, v in lines.items() if "this stack" in k and "asked" not in k)
            assert static.get_linestyle() != stack.get_linestyle()
            assert static.get_zorder() < stack.get_zorder()  # the thin solid line drawn over the wide dashed one


def test_no_legend_covers_the_data(drawn: list[Figure]) -> None:
    for figure in drawn:
        renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
        for axes in figure.axes:
            legend = axes.get_legend()
            assert legend is not None
            box, area = legend.get_window_extent(renderer), axes.get_window_extent(renderer)
            assert box.x0 >= area.x1, axes.get_title()
