"""The site spec against generated hostile input (issue 21): never a traceback, only problems with their paths, and
every spec it accepts renders a slurm.conf that Slurm's own client parses, holding exactly the records the spec
implies (no value adds a line, a key or a word).

Each example changes one to three values of the whole prod site (every default written out, so the Slurm settings
are in reach): a string becomes hostile text (newlines, spaces, shell metacharacters, unicode) or a plausible one,
a number becomes a huge, non-finite, boolean or plausible one, a key goes or an unknown one comes, a whole section
becomes raw text. SPEC_FUZZ_EXAMPLES sets the example count (4,000 in `make test`, about 25 s here; earlier sessions
ran 10,000); the distinct accepted slurm.conf files, at most SCONTROL_CAP, go to `scontrol` after the run.

Each run draws from a seed it prints (SPEC_FUZZ_SEED=<seed> replays that run's draws), and a failure also prints
Hypothesis's reproduce blob. Examples that once failed are pinned with `@example`: a draw once set
slurm.slurmd_timeout_s to 1, which slurm.conf carried as SlurmdTimeout=1 while this test's model still held the prod
file's 300 as a fixed setting (the spec had grown the value since; 70e06c5 made the model read it from the spec).
"""

import json
import math
import os
import pwd
import re
import secrets
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st

from components.site.catalog import gres_type
from components.site.problems import SiteSpecError
from components.site.site import Pool, Site, SlurmSettings
from components.site.wellknown import COLD_FILESYSTEM
from components.slurm.conf import render_slurm_conf
from components.slurm.scripts import render_tier_mounts
from components.storage.tiers import NFS_MOUNT_OPTIONS, prefetch_daemonset, prefetched_dirs
from components.validate import SECRET_KEYS, parse_site
from tests.builders import encode, parse, prod_values

EXAMPLES = int(os.environ.get("SPEC_FUZZ_EXAMPLES", "4000"))
SCONTROL_CAP = 300
"""Distinct accepted slurm.conf files given to scontrol (~5 ms each)."""

BASELINE = parse(prod_values())
WHOLE_SITE = BASELINE.model_dump(mode="json")
SECRETS = {key: "placeholder" for key in SECRET_KEYS}
SEED = int(os.environ.get("SPEC_FUZZ_SEED") or secrets.randbits(64))
"""The run's draws: printed with the figures and on a failure, so any run can be replayed."""


def _leaves(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += _leaves(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _leaves(child, (*prefix, index))
    return found


PATHS = _leaves(WHOLE_SITE)
INTO_SLURM_CONF = [p for p in PATHS if p[0] in ("site_name", "slurm") or (
    p[0] == "node_groups" and len(p) > 2 and p[2] in ("nodes", "cpus", "memory_gib", "gpus_per_node", "pool"))]
"""Half the changes land here, so enough accepted specs change slurm.conf."""

METACHARACTERS = "\n\r\t \\$`;|&<>()'\"#=*?~!{}[]%,\x00é中\u2028"
plausible_name = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,14}[a-z0-9])?", fullmatch=True)
plausible_path = st.from_regex(r"(/[A-Za-z0-9._+@-]{1,8}){1,3}", fullmatch=True)
hostile_text = st.one_of(
    st.text(max_size=30),
    st.tuples(st.one_of(plausible_name, plausible_path), st.text(METACHARACTERS, min_size=1, max_size=3),
              plausible_name).map("".join),
    st.sampled_from(["a\nPrologSlurmctld=/srv/evil.sh", "10.0.0.1 -oProxyCommand=sh", "a;rm -rf /", "$(id)", "`id`",
                     "/var/log/../../etc", "a=b", "#x", "", " ", "yes", "inf", "NaN", "1e999"]),
    plausible_name,
    plausible_path,
)
hostile_number = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0, max_value=1e4),
    st.integers(min_value=1, max_value=1024),
    st.booleans(),
)
# scontrol resolves SlurmUser in this machine's passwd ("Invalid user for SlurmUser h", fatal): that the user exists
# is the hosts' fact (Debian's slurm packages make `slurm`), not the spec's. A drawn name the spec's pattern accepts
# but this machine lacks becomes one it has; every other draw still tries the pattern.
SLURM_USER = ("slurm", "slurm_user")
LOCAL_USERS = sorted({u.pw_name for u in pwd.getpwall()})
USER_NAME = next(m.pattern for m in SlurmSettings.model_fields["slurm_user"].metadata if getattr(m, "pattern", None))


def _user_this_machine_lacks(name: Any) -> bool:
    return isinstance(name, str) and name not in LOCAL_USERS and re.fullmatch(USER_NAME, name) is not None


junk = st.one_of(st.none(), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=4), st.integers(),
                                                                                    max_size=2))


@st.composite
def hostile_site(draw: st.DrawFn) -> dict[str, str]:
    """The raw config the CLI would hand over (objects as JSON), one to three values changed."""
    values = json.loads(json.dumps(WHOLE_SITE))
    raw_sections: dict[str, str] = {}
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(PATHS) | st.sampled_from(INTO_SLURM_CONF))
        try:
            parent = values
            for part in path[:-1]:
                parent = parent[part]
            old, last = parent[path[-1]], path[-1]
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed or retyped this path's parent
        if not isinstance(parent, dict | list):
            continue  # an earlier change made the parent text, which a path can still index
        change = draw(st.sampled_from(["same-kind", "same-kind", "other-kind", "delete", "unknown-key", "raw"]))
        if change == "delete" and isinstance(parent, dict):
            del parent[last]
        elif change == "unknown-key" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(hostile_text)
        elif change == "raw":
            raw_sections[path[0]] = draw(hostile_text)
        elif change == "same-kind" and isinstance(old, str):
            parent[last] = draw(hostile_text)
        elif change == "same-kind" and isinstance(old, int | float):
            parent[last] = draw(hostile_number)
        else:
            parent[last] = draw(st.one_of(hostile_text, hostile_number, junk))
        named = parent.get(last) if isinstance(parent, dict) else None
        if path == SLURM_USER and _user_this_machine_lacks(named):
            parent[last] = draw(st.sampled_from(LOCAL_USERS))
    return encode(values) | raw_sections | SECRETS


def _changed(path: tuple[Any, ...], value: Any) -> dict[str, str]:
    """The whole site with one value set, as the CLI hands it over: a pinned example."""
    values = json.loads(json.dumps(WHOLE_SITE))
    parent = values
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    return encode(values) | SECRETS


def _records(text: str) -> list[dict[str, str]]:
    """slurm.conf as Slurm reads it (slurm.conf(5)): `#` starts a comment, a record is whitespace-separated
    `Key=Value` pairs on one line, keys are case-insensitive."""
    records = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            pairs = [word.partition("=") for word in words]
            records.append({key.lower(): value for key, _, value in pairs})
    return records


FIXED = [record for record in _records(render_slurm_conf(BASELINE)) if not {"nodename", "partitionname"} & set(record)]
"""The settings no spec value changes, as the prod file holds them."""


def implied_records(site: Site) -> list[dict[str, str]]:
    """The records slurm.conf must hold for this spec: the fixed settings with the spec's values, one node record
    per Slurm-pool node, one partition per GPU type and pool."""
    slurm = site.slurm
    groups = [g for g in site.node_groups if g.pool != Pool.KUBERNETES]
    hosts = [node.ssh_host for g in groups for node in g.nodes]
    # Several slurmd on one host: each its own spool, PID and log file (%n, the node's name).
    node = "-%n" if len(set(hosts)) < len(hosts) else ""
    from_spec = {
        "clustername": site.site_name, "slurmctldhost": slurm.controller_host,
        "slurmctldport": str(slurm.slurmctld_port), "slurmdport": str(slurm.slurmd_port),
        "slurmuser": slurm.slurm_user, "authinfo": f"socket={slurm.munge_socket}",
        "statesavelocation": slurm.state_save_dir, "slurmdspooldir": slurm.slurmd_spool_dir + ("/%n" if node else ""),
        "slurmctldpidfile": f"{slurm.run_dir}/slurmctld.pid", "slurmdpidfile": f"{slurm.run_dir}/slurmd{node}.pid",
        "slurmctldlogfile": f"{slurm.log_dir}/slurmctld.log", "slurmdlogfile": f"{slurm.log_dir}/slurmd{node}.log",
        "prolog": f"{slurm.scripts_dir}/prolog.sh", "epilog": f"{slurm.scripts_dir}/epilog.sh",
        "accountingstoragepass": slurm.munge_socket,
        "defmempergpu": str(slurm.def_mem_per_gpu_gib * 1024), "priorityweightqos": str(slurm.priority_weight_qos),
        "priorityweightfairshare": str(slurm.priority_weight_fairshare),
        "accountingstoragehost": slurm.controller_host, "accountingstorageport": str(slurm.slurmdbd_port),
        "slurmdtimeout": str(slurm.slurmd_timeout_s),
    }
    assert set(from_spec) <= {key for record in FIXED for key in record}
    settings_ = [{key: from_spec.get(key, value) for key, value in record.items()} for record in FIXED]
    if slurm.config_overrides:
        after = next(i for i, record in enumerate(settings_) if "jobacctgathertype" in record)
        settings_.insert(after + 1, {"slurmdparameters": "config_overrides"})
    nodes = [{"nodename": n.name, "nodeaddr": n.ssh_host, **({"port": str(n.slurmd_port)} if n.slurmd_port else {}),
              "cpus": str(g.cpus),
              "realmemory": str(math.floor(g.memory_gib * 1024 * (1 - slurm.os_memory_reserve_pct / 100))),
              "gres": f"gpu:{gres_type(g.gpu_model)}:{g.gpus_per_node}", "state": "UNKNOWN"}
             for g in groups for n in g.nodes]
    members: dict[str, list[str]] = {}
    for g in groups:
        role = "flex" if g.pool == Pool.FLEX else "train"
        members.setdefault(f"{gres_type(g.gpu_model)}-{role}", []).extend(n.name for n in g.nodes)
    # A flex partition admits slurm.flex_qos alone.
    partitions = [{"partitionname": name, "nodes": ",".join(names), "default": "YES" if i == 0 else "NO",
                   "maxtime": "INFINITE", "state": "UP",
                   **({"allowqos": ",".join(slurm.flex_qos)} if name.endswith("-flex") else {})}
                  for i, (name, names) in enumerate(members.items())]
    return settings_ + nodes + partitions


def _check_accepted(site: Site) -> str:
    """What an accepted spec renders keeps its shape; returns its slurm.conf."""
    conf = render_slurm_conf(site)
    assert _records(conf) == implied_records(site)
    baseline_mount = next(iter(render_tier_mounts(BASELINE, NFS_MOUNT_OPTIONS, COLD_FILESYSTEM).values()))
    for unit, content in render_tier_mounts(site, NFS_MOUNT_OPTIONS, COLD_FILESYSTEM).items():
        assert "\n" not in unit and len(content.splitlines()) == len(baseline_mount.splitlines())
    # The size check, `mkdir && cp && touch` per cached directory, the fill check and the cache's marker: no entry adds
    # a command.
    prefetch = prefetch_daemonset(site)["spec"]["template"]["spec"]["initContainers"][0]["command"][2]
    assert shlex.split(prefetch).count("&&") == 3 * len(prefetched_dirs(site)) + 2
    return conf


def _scontrol_parses(confs: list[str], tmp_path: Path) -> list[str]:
    """The files scontrol refuses, each with what it said."""
    refused = []
    for index, conf in enumerate(confs):
        path = tmp_path / f"slurm-{index}.conf"
        path.write_text(conf)
        result = subprocess.run(["scontrol", "show", "hostnames", "localhost"], capture_output=True, text=True,
                                env={**os.environ, "SLURM_CONF": str(path)}, timeout=30)
        if result.returncode != 0:
            refused.append(f"{path}: {result.stderr.strip()}")
    return refused


def test_should_accept_the_whole_prod_site_as_written_out() -> None:
    assert parse_site(encode(WHOLE_SITE) | SECRETS, set(SECRET_KEYS)) == BASELINE
    assert _records(render_slurm_conf(BASELINE)) == implied_records(BASELINE)


@pytest.mark.expected_s(115)
def test_should_never_give_a_traceback_and_render_only_what_the_spec_implies(
    tmp_path: Path, report_figure: Callable[[str], None]
) -> None:
    examples, accepted_specs = [0], [0]
    accepted: dict[str, None] = {}

    @seed(SEED)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(raw=hostile_site())
    @example(raw=_changed(("slurm", "slurmd_timeout_s"), 1))
    # Values that add a record or a key (SlurmdParameters, a node's Port=), pinned so every run checks them.
    @example(raw=_changed(("slurm", "config_overrides"), True))
    @example(raw=_changed(("node_groups", 0, "nodes", 0, "slurmd_port"), 27001))
    def judge(raw: dict[str, str]) -> None:
        examples[0] += 1
        try:
            site = parse_site(raw, set(SECRET_KEYS))
        except SiteSpecError as error:
            assert error.problems and all(p.path and p.message for p in error.problems)
            return
        accepted_specs[0] += 1
        accepted.setdefault(_check_accepted(site))

    report_figure(f"spec fuzz: seed {SEED} (SPEC_FUZZ_SEED={SEED} replays this run)")
    started = time.monotonic()
    try:
        judge()
    except BaseException as error:
        error.add_note(f"spec fuzz seed {SEED}: SPEC_FUZZ_SEED={SEED} replays this run's draws")
        raise
    fuzzed_s = time.monotonic() - started
    confs = list(accepted)[:SCONTROL_CAP]
    report_figure(f"spec fuzz: {examples[0]} examples in {fuzzed_s:.1f} s, {accepted_specs[0]} accepted, "
                  f"{len(accepted)} distinct slurm.conf files among them")
    assert len(accepted) > 1, "no example changed slurm.conf and was accepted: the fuzz reaches no Slurm setting"
    if shutil.which("scontrol") is None:
        pytest.skip(f"scontrol is not installed (apt-get install slurm-client): {len(confs)} accepted slurm.conf "
                    "files not parsed")
    started = time.monotonic()
    refused = _scontrol_parses(confs, tmp_path)
    report_figure(f"spec fuzz: scontrol parsed {len(confs) - len(refused)} of {len(confs)} accepted slurm.conf files "
                  f"in {time.monotonic() - started:.1f} s")
    assert refused == []
