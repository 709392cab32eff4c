"""A rule's identity: the runner stamps each Rule's id on the problems its check returns, so no check types its own
name; the ids are the ones the docs list (docs/architecture.md, "The spec's rules")."""

import re
from pathlib import Path
from typing import Any

from components.site.problems import Problem
from components.site.rules import rule
from components.site.site import Site
from components.validate import RULES
from tests.builders import REPO, parse


def test_should_stamp_the_rules_id_on_every_problem_its_check_returns(prod: dict[str, Any]) -> None:
    found = [Problem("racks[0].name", "one"), Problem("racks[1].name", "two", "some-other-rule")]

    def check(site: Site) -> list[Problem]:
        return found

    judged = rule("unique-names", check, "racks").judge(parse(prod))
    assert [(p.path, p.message, p.rule) for p in judged] == [
        ("racks[0].name", "one", "unique-names"),
        ("racks[1].name", "two", "unique-names"),
    ]


def test_should_name_every_rule_in_kebab_case() -> None:
    assert [r.id for r in RULES if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", r.id)] == []


def documented_rules(doc: Path) -> list[str]:
    """The ids in the first column of the doc's table headed `| spec rule |`."""
    lines = doc.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| spec rule |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip().strip("`"))
    return rows


def test_should_document_each_rule_id_the_code_declares() -> None:
    documented = documented_rules(REPO / "docs" / "architecture.md")
    assert len(documented) == len(set(documented))
    # `secrets` is parse_site's own check of the config's secret keys, outside the spec and its rules.
    assert set(documented) == {r.id for r in RULES} | {"secrets"}
