"""The one table of objects the site's operators create before `pulumi up` (components/supplied.py): the README's run
sequence creates each, so the references-resolve invariant accepts a pod's use of no other object the stack lacks."""

import re

from components.supplied import operator_supplied
from tests.builders import REPO, parse, prod_values, with_changes


def run_sequence() -> str:
    readme = (REPO / "README.md").read_text()
    start = readme.index("## How the platform team runs it for real")
    return readme[start:readme.index("\n## ", start + 1)]


def test_should_have_the_readmes_run_sequence_create_every_operator_supplied_object() -> None:
    supplied = operator_supplied(parse(prod_values()))
    assert {s.kind for s in supplied} == {"Secret"}
    for s in supplied:
        assert re.search(rf"kubectl -n {s.namespace} create secret generic {s.name}\b", run_sequence()), s


def test_should_name_the_provider_secret_the_site_names() -> None:
    site = parse(with_changes(prod_values(), inference__gateway__provider_secret="vendor-keys"))
    assert ("inference", "vendor-keys") in {(s.namespace, s.name) for s in operator_supplied(site)}
