"""The plan reads what Helm printed with libyaml, writes helm/*.yaml as Helm printed it, writes its own YAML with
libyaml, and judges core objects with validators it builds once per kind: the same objects, the same bytes and the same
verdicts as PyYAML's pure-Python loader and emitter and kubernetes-validate, on every chart the prod stack renders and
on the cases where libyaml writes differently."""

import copy
import re
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from runbooks.offline.engine import run_program
from runbooks.plan.helm import RELEASE_TYPE, RenderedRelease, find_helm, streams, template, validate
from runbooks.plan.yaml_stream import dump_all, parse
from tests.builders import REPO

MIRROR = REPO.parent / "shared" / "charts"
HELM = find_helm()
pytestmark = pytest.mark.skipif(HELM is None or not MIRROR.is_dir(),
                                reason="needs helm (make test installs it in .venv/bin) and the chart mirror "
                                       "../shared/charts")
KUBE_VERSION = "1.30"


class PureLoader(yaml.SafeLoader):
    """PyYAML's pure-Python loader, reading the "value" tag as the plan does: as a plain string."""


def plain_value(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))


PureLoader.add_constructor("tag:yaml.org,2002:value", plain_value)


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What `helm template` printed for each release of the prod stack, by release name."""
    assert HELM is not None
    scratch = tmp_path_factory.mktemp("values")
    return {r.inputs.get("name") or r.name: template(r, MIRROR, KUBE_VERSION, HELM, scratch)[1]
            for r in run_program(REPO, "prod").of_type(RELEASE_TYPE)}


def test_should_read_what_helm_printed_as_pyyaml_does(printed: dict[str, str]) -> None:
    for release, text in printed.items():
        assert parse(text).objects == [o for o in yaml.load_all(text, Loader=PureLoader) if isinstance(o, dict)], \
            release


def test_should_write_every_release_byte_for_byte_as_pyyaml_does(printed: dict[str, str]) -> None:
    libyaml_differs = []
    for release, text in printed.items():
        objects = parse(text).objects
        pure = yaml.safe_dump_all(objects, sort_keys=False)
        assert dump_all(objects) == pure, release
        libyaml_differs += [release] if yaml.dump_all(objects, Dumper=yaml.CSafeDumper, sort_keys=False) != pure else []
    assert libyaml_differs, "no release has a string libyaml folds its own way: this test no longer tests that case"


@pytest.mark.parametrize("text", [
    pytest.param("base: &base {a: 1, b: [x, y]}\nmerged:\n  <<: *base\n  b: z\nmany:\n  <<: [*base, {c: 2}]\n",
                 id="should merge as PyYAML does"),
    pytest.param("ops: {=: 1, plain: =}\n", id="should read the value key and value as PyYAML does"),
    pytest.param("ints: [1, 0x1f, 0o17, 1_000, 190:20:30, -0]\nfloats: [1.5, .inf, -.Inf, 6.8e+5]\n"
                 "bools: [yes, No, on, OFF, true]\nnulls: [~, null, '']\nwhen: 2001-12-14t21:59:43.10-05:00\n"
                 "day: 2002-12-14\nbytes: !!binary aGVsbG8=\nkeys: {1: a, true: b, null: c, 1.5: d}\n",
                 id="should read every implicit and explicit scalar as PyYAML does"),
    pytest.param("set: !!set {a, b}\nomap: !!omap [{a: 1}, {b: 2}]\npairs: !!pairs [{a: 1}, {a: 2}]\n"
                 "str: !!str 1\nmap: !!map {a: 1}\nseq: !!seq [1]\n",
                 id="should read explicitly tagged collections as PyYAML does"),
    pytest.param("shared: &s [1, {deep: &d {x: 1}}]\nagain: *s\nalso: *d\nequal: [1, {deep: {x: 1}}]\n",
                 id="should read an alias as the object it names as PyYAML does"),
    pytest.param("---\nshared: &s [1]\n---\nother: *s\n", id="should read an alias in its document only"),
    pytest.param("key: [1, 2]\n? [1, 2]\n: unhashable\n", id="should refuse an unhashable key as PyYAML does"),
    pytest.param("self: &me\n  child: *me\n", id="should read a recursive mapping as PyYAML does"),
])
def test_should_read_what_pyyaml_reads_as_it_reads_it(text: str) -> None:
    try:
        pure = [o for o in yaml.load_all(text, Loader=PureLoader) if isinstance(o, dict)]
    except yaml.YAMLError as error:
        # libyaml words its own errors without the alias's name.
        problem = str(error.problem).split(" '")[0]  # type: ignore[attr-defined]
        with pytest.raises(type(error), match=re.escape(problem)):
            parse(text)
        return
    objects = parse(text).objects
    assert repr(objects) == repr(pure)
    for obj, alike in zip(objects, pure, strict=True):
        # Aliases read the same object, not an equal copy, as PyYAML gives them.
        assert [id(v) == id(w) for v in obj.values() for w in obj.values()] == \
            [id(v) == id(w) for v in alike.values() for w in alike.values()]


def written(text: str, namespace: str = "default") -> str:
    """helm/<release>.yaml as the plan writes what Helm printed (runbooks/plan/helm.py's streams)."""
    parsed = parse(text)
    return streams([RenderedRelease("release", "chart-0.1.0", "0.1.0", namespace, parsed.objects,
                                    parsed.documents)])[0]


def test_should_write_what_helm_printed_as_it_printed_it(printed: dict[str, str]) -> None:
    for release, text in printed.items():
        parsed = parse(text)
        # Each document Helm's own bytes, one after the other, with no document of Helm's that holds an object left
        # out; the one change: kube-prometheus-stack's sequence items `- =` written `- '='`.
        assert all(re.sub(r"^( *- )'='$", r"\1=", d.text, flags=re.M) in text for d in parsed.documents), release
        assert written(text).count("\n---\n") + 1 == len(parsed.objects), release
        assert list(yaml.safe_load_all(written(text))) == parsed.objects, release
    assert written(printed["kueue"]) == printed["kueue"], "kueue renders no empty document and no `=`"


def test_should_quote_what_pyyamls_safe_loader_cannot_read(printed: dict[str, str]) -> None:
    # kube-prometheus-stack's CRDs list the matcher `=` plain, which YAML 1.1 resolves to its "value" tag.
    with pytest.raises(yaml.constructor.ConstructorError, match="tag:yaml.org,2002:value"):
        list(yaml.safe_load_all(printed["kube-prometheus-stack"]))
    assert "- '='\n" in written(printed["kube-prometheus-stack"])


@pytest.mark.parametrize(("printed", "expected"), [
    pytest.param("---\n# Source: c/crds/a.yaml\n---\nkind: A\n---\n# Source: c/templates/b.yaml\n# comment\n"
                 "---\n# Source: c/templates/c.yaml\nkind: C\n",
                 "---\nkind: A\n---\n# Source: c/templates/c.yaml\nkind: C\n",
                 id="should leave out documents that hold no object"),
    pytest.param("---\n# Source: c/t.yaml\nkind: A\nops: [=, '!=', =~]\nmatch:\n- =\n- =: =\n",
                 "---\n# Source: c/t.yaml\nkind: A\nops: ['=', '!=', =~]\nmatch:\n- '='\n- =: '='\n",
                 id="should quote each plain = but a key"),
    pytest.param("---\n# Source: c/t.yaml\nkind: A\nops: [&eq =, *eq]\n---\nkind: B\n",
                 "---\n# Source: c/t.yaml\nkind: A\nops:\n- '='\n- '='\n---\nkind: B\n",
                 id="should write a document whose = is anchored as PyYAML does"),
    pytest.param("---\n# Source: c/t.yaml\n{kind: A, list: [1, 2]}\n---\n- not an object\n---\nkind: B # last\n",
                 "---\n# Source: c/t.yaml\n{kind: A, list: [1, 2]}\n---\nkind: B # last\n",
                 id="should keep flow mappings and comments as printed"),
    pytest.param("kind: A\n---\n# Source: c/t.yaml\n---\n{kind: B}", "kind: A\n---\n{kind: B}",
                 id="should keep a first document without --- and a last one without its line break"),
])
def test_should_write_each_document_as_helm_printed_it_unless_pyyaml_cannot_read_it(printed: str,
                                                                                    expected: str) -> None:
    assert written(printed) == expected
    assert list(yaml.safe_load_all(expected)) == parse(printed).objects


def test_should_write_a_document_the_plan_changed_as_pyyaml_does() -> None:
    (document,) = parse("---\n# Source: c/t.yaml\nkind: A\nmetadata: {name: a}\n").documents
    rewritten = document.rewritten({"kind": "A", "metadata": {"name": "a", "namespace": "n"}})
    assert rewritten.text == "---\n# Source: c/t.yaml\nkind: A\nmetadata:\n  name: a\n  namespace: n\n"
    assert rewritten.text[rewritten.head:] == "kind: A\nmetadata:\n  name: a\n  namespace: n\n"


FOLDED = ("type indicates which kind of AppArmor profile will be applied.\nValid options are:\n  Localhost - a "
          "profile pre-loaded on the node.\n  RuntimeDefault - the container runtime's default profile.")
"""A string PyYAML double-quotes (a space after a line break) and folds where it runs past 80 columns."""


def nested(depth: int, value: Any) -> Any:
    return value if depth == 0 else {"level": nested(depth - 1, value)}


SHARED = {"description": FOLDED}


@pytest.mark.parametrize("documents", [
    pytest.param([nested(depth, {"description": FOLDED}) for depth in range(12)],
                 id="should fold a mapping value at every depth as PyYAML does"),
    pytest.param([nested(depth, {"items": [FOLDED, "plain", [FOLDED, [FOLDED]]]}) for depth in range(6)],
                 id="should fold sequence items and nested sequences' items as PyYAML does"),
    pytest.param([{"items": [{"first": FOLDED, "second": FOLDED}, [{"inner": FOLDED}]]}],
                 id="should fold values of mappings in sequences as PyYAML does"),
    pytest.param([{"k" * 130: FOLDED, "short": {"x" * 200: [FOLDED]}}],
                 id="should fold the value of a key too long to be simple as PyYAML does"),
    pytest.param([{"tab\tkey": "v", "line\nkey": FOLDED, "caf\u00e9": "na\u00efve"}],
                 id="should write keys PyYAML double-quotes as PyYAML does"),
    pytest.param([{"a": SHARED, "b": [SHARED, SHARED]}],
                 id="should anchor what the documents share as PyYAML does"),
    pytest.param([{"unicode": "caf\u00e9 \u2013 \u2603 \U0001f600 " * 12, "tab": "a\tb " * 40, "nul": "a\0b",
                   "breaks": " \n leading space and break\n", "trailing": "trailing space \n", "empty": "",
                   "short": "x\n y", "windows": "one\r\ntwo \r\n", "separators": "a\u2028b\x85c\ufeff"}],
                 id="should escape and fold every special character as PyYAML does"),
    pytest.param([{"text": "pyyaml-double-quoted-0123456789abcdef", "n": 1, "f": 1.5, "t": True, "z": None,
                   "e": {}, "l": []}, {"second": FOLDED}, {"third": [FOLDED]}],
                 id="should write scalars, empty collections and several documents as PyYAML does"),
])
def test_should_write_what_libyaml_folds_its_own_way_as_pyyaml_does(documents: list[dict[str, Any]]) -> None:
    assert dump_all(documents) == yaml.safe_dump_all(documents, sort_keys=False)


def library_verdict(obj: dict[str, Any]) -> str | None:
    """kubernetes-validate's own verdict on an object, worded as the plan words it."""
    try:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return f"{'.'.join(map(str, error.absolute_path)) or '(top)'}: {error.message}"
    except kubernetes_validate.SchemaNotFoundError:
        return f"no schema: neither Kubernetes {KUBE_VERSION} nor a rendered CRD defines {obj.get('apiVersion')} " \
               f"{obj.get('kind')}"
    return None


def test_should_judge_each_kind_as_kubernetes_validate_does(printed: dict[str, str]) -> None:
    # One object of each kind the stack renders, alone (a custom kind has no CRD beside it: no schema), as rendered,
    # with a field no schema defines and with a label of the wrong type.
    kinds = {(o["apiVersion"], o["kind"]): o for text in printed.values() for o in parse(text).objects}
    judged = []
    for obj in kinds.values():
        unknown, mistyped = {**copy.deepcopy(obj), "unexpected": True}, copy.deepcopy(obj)
        mistyped["metadata"].setdefault("labels", {})["tier"] = 3
        judged += [obj, unknown, mistyped]
    for obj in judged:
        found = validate([RenderedRelease("release", "chart-0.1.0", "0.1.0", "default", [obj])], KUBE_VERSION)
        assert [i.reason for i in found] == [r for r in [library_verdict(obj)] if r], (obj["kind"], obj["metadata"])
    assert sum(library_verdict(o) is None for o in judged) >= 20, "too few valid objects to compare"
