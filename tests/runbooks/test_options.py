"""The context every stack command gets: the site read once, each runbook's state dir in one place."""

from pathlib import Path

from runbooks.options import StackContext, state_dir
from tests.builders import REPO


def test_should_read_the_site_once_per_command() -> None:
    context = StackContext(REPO, "prod")
    assert context.site is context.site


def test_should_default_each_state_dir_unless_the_command_line_names_it(tmp_path: Path) -> None:
    context = StackContext(REPO, "prod", {"acceptance": tmp_path, "rollout": None})
    assert context.state_dir("rollout") == state_dir(REPO, "prod", "rollout") == REPO / ".gpuctl" / "rollout-prod"
    assert context.state_dir("acceptance") == tmp_path


def test_should_spell_the_state_dirs_in_options_alone() -> None:
    # Two runbooks spelled the rollout's default dir and could drift apart; a new spelling fails here.
    spelled = [str(p.relative_to(REPO)) for p in (REPO / "runbooks").rglob("*.py") if '".gpuctl"' in p.read_text()]
    assert spelled == ["runbooks/options.py"]
