"""Validate a site one top-level section at a time, so a type error in one section hides no other problem.

`validate_sections` checks every section of the stack file on its own (`racks`, `monitoring`, `slack`, ...). When
all pass, the site is built by `Site` itself; when some fail, the rest still make a partial site on which every
cross-field rule that reads no failed section runs (components.site.rules.Rule.reads). A file with two type
errors and three broken rules reports five problems in one run, not two now and three on the next.
"""

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import TypeAdapter, ValidationError

from components.site.problems import Problem
from components.site.rules import Rule
from components.site.site import Site


@dataclass(frozen=True)
class Sections:
    site: Site
    """The whole site, or when `failed` is not empty a partial one: a failed section is absent from it."""
    failed: frozenset[str]
    """Top-level keys that did not parse; rules reading them are skipped."""
    problems: list[Problem]
    """Each section's schema problems, with their paths."""


def validate_sections(data: Mapping[str, Any], unreadable: Iterable[str] = ()) -> Sections:
    """data: top-level key -> decoded value. unreadable: keys already reported (not JSON), treated as failed."""
    values: dict[str, Any] = {}
    failed = set(unreadable)
    problems = []
    for name, field in Site.model_fields.items():
        if name in failed:
            continue
        if name in data:
            value = data[name]
        elif field.is_required():
            failed.add(name)
            problems.append(Problem(name, "required key is missing"))
            continue
        else:
            value = field.get_default(call_default_factory=True)
        try:
            values[name] = _adapter(name).validate_python(value)
        except ValidationError as error:
            failed.add(name)
            problems += [Problem(path((name, *e["loc"])), message(e)) for e in error.errors(include_url=False)]
    if failed:
        return Sections(_partial(values, failed), frozenset(failed), problems)
    # Every section is already valid: Site takes the parsed values as they are.
    return Sections(Site.model_validate(values), frozenset(), problems)


def run_rules(rules: Iterable[Rule[Site]], sections: Sections) -> list[Problem]:
    return [p for rule in rules if not rule.reads & sections.failed for p in rule.judge(sections.site)]


@functools.cache
def _adapter(name: str) -> TypeAdapter[Any]:
    """The section's type with its constraints and validators, as Site declares it. Site itself has no validators
    (tests/components/site/test_sections.py holds it to that): a rule across sections is a Rule."""
    field = Site.model_fields[name]
    return TypeAdapter(Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation)


def _partial(values: dict[str, Any], failed: set[str]) -> Site:
    site = Site.model_construct(**values)
    # model_construct fills a failed section's default; remove it, so a rule that reads a failed section it did
    # not declare fails loudly instead of judging the default.
    for name in failed:
        vars(site).pop(name, None)
    return site


def path(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def message(error: Any) -> str:
    kind = error["type"]
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        return "unknown key"
    shown = json.dumps(error["input"], default=str)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{error['msg']} (got {shown})"
