"""Spec problems: every error carries the field path and the rule it breaks, and all are raised once."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    path: str
    """Where in the stack file, e.g. `racks[2].cooling.capacity_kw`."""
    message: str
    """The rule and the numbers that break it."""
    rule: str = "schema"
    """Name of the rule, so components can report a verdict per rule (`rack-load-within-power`, ...): a cross-field
    rule's id, stamped by components.site.rules.Rule.judge; a type error's is the default."""

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SiteSpecError(Exception):
    """The site spec is invalid; raised once, before any resource is registered, with every problem."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid site spec ({len(problems)} problem{'s' * (len(problems) != 1)}):\n{lines}")
