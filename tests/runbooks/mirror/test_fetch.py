"""Where the plan and the bundle take each release's chart from: the site's folder mirror where the release names it,
the --chart-mirror folder otherwise, and never an archive whose sha256 is not the pinned one."""

import shutil
from pathlib import Path

import pytest

from components.charts import KEDA, KUEUE
from runbooks.plan.helm import PINNED_ONLY, ChartSource, HelmError, fetch
from tests.builders import REPO

CHART_MIRROR = REPO.parent / "shared" / "charts"
pytestmark = pytest.mark.skipif(not CHART_MIRROR.is_dir(), reason="needs the chart mirror ../shared/charts")


def test_should_take_the_archive_a_release_names_in_the_sites_folder_mirror(tmp_path: Path) -> None:
    named = f"{CHART_MIRROR}/{KUEUE.archive}"
    assert fetch(named, KUEUE.version, None, ChartSource(str(CHART_MIRROR)), "helm", tmp_path) == Path(named)
    with pytest.raises(HelmError, match=rf"chart {KEDA.archive} is not in the site's chart mirror /srv/charts"):
        fetch(f"/srv/charts/{KEDA.archive}", KEDA.version, None, ChartSource("/srv/charts"), "helm", tmp_path)


def test_should_refuse_an_archive_that_is_not_the_pinned_one(tmp_path: Path) -> None:
    changed = Path(shutil.copy(CHART_MIRROR / KEDA.archive, tmp_path / KEDA.archive))
    with changed.open("ab") as archive:
        archive.write(b"\0")
    with pytest.raises(HelmError, match=rf"has sha256 [0-9a-f]{{64}}, not the {KEDA.sha256} that components/charts.py "
                                        rf"pins for keda 2.20.2"):
        fetch(KEDA.name, KEDA.version, tmp_path, PINNED_ONLY, "helm", tmp_path)
    assert fetch(KEDA.name, KEDA.version, CHART_MIRROR, PINNED_ONLY, "helm", tmp_path) == CHART_MIRROR / KEDA.archive


def test_should_need_a_mirror_for_a_chart_no_mirror_holds(tmp_path: Path) -> None:
    with pytest.raises(HelmError, match="is in no chart mirror: give --chart-mirror, or set mirror.charts"):
        fetch(KEDA.name, KEDA.version, None, PINNED_ONLY, "helm", tmp_path)
