"""The one console pair every gpuctl command prints through."""

import sys

from rich.console import Console

out = Console(width=None if sys.stdout.isatty() else 150)
"""Results. Piped output (CI logs, files) gets room for the rack table instead of rich's 80-column default."""
err = Console(stderr=True, soft_wrap=True)
"""Errors and progress. Never wrapped: an error is one line a person or a log search can read whole."""
