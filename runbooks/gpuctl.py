"""The `gpuctl` console script: the command line, or one line naming a module the install lacks."""

import sys

from runbooks.children import missing_module
from runbooks.exit_codes import ExitCode


def main() -> None:
    try:
        from runbooks.cli import app  # imports every package gpuctl uses
    except ModuleNotFoundError as error:
        print(f"error: {missing_module(error.name or str(error))}", file=sys.stderr)
        raise SystemExit(ExitCode.FAILED) from None
    app()
