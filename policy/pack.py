"""The pack's policies: every module of the pack that declares POLICIES, so a module's policies are registered once,
where they are written, and join the pack with no second list to keep."""

import importlib
import pkgutil
from pathlib import Path

from pulumi_policy import Policy

PACK_DIR = Path(__file__).parent


def all_policies() -> list[Policy]:
    """Each module's POLICIES, modules by name (`__main__` serves the pack, so it is never imported here)."""
    names = sorted(m.name for m in pkgutil.iter_modules([str(PACK_DIR)]) if m.name != "__main__")
    return [policy for name in names for policy in getattr(importlib.import_module(name), "POLICIES", [])]
