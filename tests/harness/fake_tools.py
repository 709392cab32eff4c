"""Commands faked at their command line: scripts written into a folder put first on PATH for one test."""
import os
from collections.abc import Mapping
from pathlib import Path

import pytest


def put_on_path(folder: Path, monkeypatch: pytest.MonkeyPatch, scripts: Mapping[str, str]) -> Path:
    """Writes each name's script into `folder` (made here), executable, and puts the folder first on PATH."""
    folder.mkdir()
    for name, text in scripts.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder
