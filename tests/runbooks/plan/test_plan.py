"""What `gpuctl plan --out` writes is a function of the site alone: anything that digests or diffs a plan can."""

from pathlib import Path

from components.validate import parse_site
from runbooks.offline.engine import load_stack_config, run_program
from runbooks.plan.files import write_plan
from runbooks.plan.out_dir import PlanFolder
from tests.builders import REPO


def written(out_dir: Path) -> dict[str, bytes]:
    return {path.relative_to(out_dir).as_posix(): path.read_bytes() for path in out_dir.rglob("*") if path.is_file()}


def test_should_write_byte_identical_files_on_two_runs(tmp_path: Path) -> None:
    config = load_stack_config(REPO, "prod")
    site = parse_site(*config.project_values())
    runs = []
    for run in ("first", "second"):
        out = tmp_path / run
        with PlanFolder.claim(out) as folder:
            files = write_plan(site, run_program(REPO, "prod", config), folder)
            # The charts render in parallel: the files reach the manifest in whatever order they finished.
            folder.record(files if run == "first" else files[::-1])
        runs.append(written(out))
    first, second = runs
    assert sorted(first) == sorted(second)
    differing = sorted(path for path in first if first[path] != second[path])
    assert differing == []
    # The files that differed before (issue 22) are the ones with dependency lists; they are among those compared.
    assert sum(b'"dependencies": [\n' in body for body in first.values()) > 0
