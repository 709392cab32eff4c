"""Fixture builders: the prod site as plain data, changed one path at a time, parsed like the CLI does."""

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from components.site.problems import SiteSpecError
from components.site.site import DEFAULT_CLASSES, Site
from components.validate import SECRET_KEYS, parse_site
from runbooks.offline.engine import StackConfig, load_stack_config

REPO = Path(__file__).resolve().parent.parent


def prod_config() -> StackConfig:
    return load_stack_config(REPO, "prod")


def prod_config_at(stage: str) -> StackConfig:
    """Pulumi.prod.yaml's config with `stage` set: a test stack at a stage that onboards teams (prod's first, as
    shipped, onboards none)."""
    config = prod_config()
    return StackConfig(config.project, {**config.values, "gpu-cluster:stage": stage}, config.secret_keys)


def prod_values() -> dict[str, Any]:
    """The prod site's config keys, objects decoded, secrets left out (see `parse`)."""
    raw, _ = prod_config().project_values()
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in SECRET_KEYS:
            continue
        try:
            values[key] = json.loads(value)
        except json.JSONDecodeError:
            values[key] = value
    return values


def with_changes(values: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A copy with each path set (`racks__0__power_budget_kw=20` sets racks[0].power_budget_kw; a section the values
    leave out is added)."""
    changed = copy.deepcopy(values)
    for path, value in changes.items():
        set_path(changed, path.replace("__", "."), value)
    return changed


def set_path(data: Any, path: str, value: Any) -> None:
    parts = [int(p) if p.isdigit() else p for p in re.split(r"[.\[\]]+", path) if p]
    for part in parts[:-1]:
        data = data.setdefault(part, {}) if isinstance(data, dict) else data[part]
    data[parts[-1]] = value


def encode(values: dict[str, Any]) -> dict[str, str]:
    """As the CLI hands config to a program: strings as they are, everything else JSON."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}


def parse(values: dict[str, Any], secrets: tuple[str, ...] = SECRET_KEYS) -> Site:
    raw = encode(values) | {key: "placeholder" for key in secrets}
    return parse_site(raw, set(secrets))


def problems(values: dict[str, Any], secrets: tuple[str, ...] = SECRET_KEYS) -> list[str]:
    try:
        parse(values, secrets)
    except SiteSpecError as error:
        return [str(p) for p in error.problems]
    raise AssertionError("the spec was accepted")


def scheduling_with(**rows: dict[str, Any]) -> dict[str, Any]:
    """The default `scheduling` with rows changed by class name (`dev={"preemptible": False}`); a row whose name
    is not in the table is appended."""
    table = [c.model_dump(mode="json", exclude_defaults=True) for c in DEFAULT_CLASSES]
    by_name = {row["name"]: row for row in table}
    for name, fields in rows.items():
        if name in by_name:
            by_name[name].update(fields)
        else:
            table.append({"name": name, **fields})
    return {"classes": table}


def copy_project(tmp_path: Path, change: Any = None) -> Path:
    """The repo's project files in tmp_path, with `change(config)` applied to Pulumi.prod.yaml's config."""
    for name in ("Pulumi.yaml", "Pulumi.prod.yaml", "__main__.py"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "policy", tmp_path / "policy", ignore=shutil.ignore_patterns("__pycache__"))
    if change is not None:
        stack = yaml.safe_load((tmp_path / "Pulumi.prod.yaml").read_text())
        change(stack["config"])
        (tmp_path / "Pulumi.prod.yaml").write_text(yaml.safe_dump(stack))
    return tmp_path
