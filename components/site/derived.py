"""Facts derived from a site are computed once per site and shared by every consumer.

A Site is frozen, so what is derived from it (the rack plan, the Kueue flavors, the rendered rules and dashboards)
never changes. `once_per_site` makes the deriving function the fact's one owner: the first call computes it, every
later call (the spec rules, the components, `gpuctl plan`'s files) gets the same value, which no caller mutates.
A fact lives as long as its site does.
"""

import functools
import weakref
from collections.abc import Callable, Hashable
from typing import Concatenate, ParamSpec, TypeVar

from components.site.site import Node, Site

P = ParamSpec("P")
T = TypeVar("T")


def once_per_site(derive: Callable[Concatenate[Site, P], T]) -> Callable[Concatenate[Site, P], T]:
    """Wrap a pure function of a site (and hashable options) so it runs once per site and options."""
    facts: dict[tuple[int, Hashable], T] = {}

    @functools.wraps(derive)
    def fact(site: Site, /, *args: P.args, **kwargs: P.kwargs) -> T:
        key = (id(site), (args, tuple(sorted(kwargs.items()))))
        if key not in facts:
            facts[key] = derive(site, *args, **kwargs)
            # Drop the fact with its site, before the site's id can be reused.
            weakref.finalize(site, facts.pop, key, None)
        return facts[key]

    return fact


@once_per_site
def nodes_by_name(site: Site) -> dict[str, Node]:
    return {node.name: node for group in site.node_groups for node in group.nodes}
