"""Generated malformed specs always give a clean SiteSpecError with paths, never a traceback."""

import json
import shlex
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from components.slurm.conf import render_slurm_conf, render_tier_mounts
from components.spec.problems import SiteSpecError
from components.spec.wellknown import COLD_FILESYSTEM
from components.storage.tiers import prefetch_daemonset
from components.teams.plan import NFS_MOUNT_OPTIONS
from components.validate import SECRET_KEYS, parse_site
from tests.builders import encode, prod_values

PROD = prod_values()

junk = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-10**9, max_value=10**9),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


PATHS = _paths(PROD)


@st.composite
def malformed(draw: st.DrawFn) -> dict[str, Any]:
    values = json.loads(json.dumps(PROD))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(PATHS))
        parent = values
        try:
            for part in path[:-1]:
                parent = parent[part]
            mutation = draw(st.sampled_from(["delete", "replace", "unknown-key", "dangling", "negative"]))
            last = path[-1]
            if mutation == "delete" and isinstance(parent, dict):
                del parent[last]
            elif mutation == "unknown-key" and isinstance(parent, dict):
                parent[draw(st.text(min_size=1, max_size=8))] = draw(junk)
            elif mutation == "dangling":
                parent[last] = draw(st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True))
            elif mutation == "negative":
                parent[last] = -draw(st.floats(min_value=0, max_value=1e6))
            else:
                parent[last] = draw(junk)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or retyped this path's parent
    return values


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=malformed(), secrets=st.sets(st.sampled_from(SECRET_KEYS)))
def test_should_fail_cleanly_on_malformed_specs(values: dict[str, Any], secrets: set[str]) -> None:
    raw = encode(values) | {key: "placeholder" for key in secrets}
    try:
        parse_site(raw, secrets)
    except SiteSpecError as error:
        assert error.problems
        for problem in error.problems:
            assert problem.path and problem.message
            assert str(error).count(str(problem)) >= 1


@settings(max_examples=100, deadline=None)
@given(key=st.sampled_from(sorted(PROD)), text=st.text(max_size=30))
def test_should_fail_cleanly_on_any_raw_string(key: str, text: str) -> None:
    raw = encode(PROD) | {key: text} | {k: "placeholder" for k in SECRET_KEYS}
    try:
        parse_site(raw, set(SECRET_KEYS))
    except SiteSpecError as error:
        assert all(p.path for p in error.problems)


def _at(values: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        values = values[part]
    return values


STRING_PATHS = [path for path in PATHS if isinstance(_at(PROD, path), str)]
HOSTILE = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["a\nPrologSlurmctld=/srv/evil.sh", "a b", "a;rm -rf /", "$(id)", "`id`", "a|b", "a\rb",
                     "/var/log/../../etc", "é", "a\x00b", "--opt", "a=b", "#x", "'", '"']),
)


def _structure(text: str) -> list[str]:
    """Each line's key (or its first word): what a value injected into a line would change."""
    return [line.split("=", 1)[0].split(" ", 1)[0] for line in text.splitlines()]


BASELINE = parse_site(encode(PROD) | {k: "placeholder" for k in SECRET_KEYS}, set(SECRET_KEYS))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(STRING_PATHS), text=HOSTILE)
def test_should_accept_no_string_that_changes_the_shape_of_what_it_lands_in(path: tuple[Any, ...], text: str) -> None:
    values = json.loads(json.dumps(PROD))
    parent = _at(values, path[:-1])
    parent[path[-1]] = text
    try:
        site = parse_site(encode(values) | {k: "placeholder" for k in SECRET_KEYS}, set(SECRET_KEYS))
    except SiteSpecError as error:
        assert all(p.path and p.message for p in error.problems)
        return
    # Accepted: slurm.conf, the mount units and the prefetch command keep their lines and words.
    assert _structure(render_slurm_conf(site)) == _structure(render_slurm_conf(BASELINE))
    for unit, content in render_tier_mounts(site, NFS_MOUNT_OPTIONS, COLD_FILESYSTEM).items():
        assert "\n" not in unit and len(content.splitlines()) == len(
            next(iter(render_tier_mounts(BASELINE, NFS_MOUNT_OPTIONS, COLD_FILESYSTEM).values())).splitlines())
    command = prefetch_daemonset(site)["spec"]["template"]["spec"]["initContainers"][0]["command"][2]
    assert shlex.split(command).count("&&") == shlex.split(
        prefetch_daemonset(BASELINE)["spec"]["template"]["spec"]["initContainers"][0]["command"][2]).count("&&")
