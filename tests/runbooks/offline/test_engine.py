"""The offline engine records what the real engine would see: URNs, parents, dependencies, options, secrets."""

import gc
import re
import textwrap
from pathlib import Path

import pytest
from pulumi.output import Unknown
from pulumi.runtime import resource as sdk_resource
from pulumi.runtime import rpc
from pulumi_kubernetes.meta.v1.outputs import LabelSelectorRequirement

from runbooks.offline.engine import (
    ProgramError,
    Secret,
    StackConfigError,
    _contains_unknowns,
    load_stack_config,
    run_program,
)

PROGRAM = '''
import pulumi

cfg = pulumi.Config()

class Box(pulumi.ComponentResource):
    def __init__(self, name, opts=None):
        super().__init__("test:box:Box", name, {"size": cfg.require_int("size")}, opts)
        self.inner = pulumi.CustomResource(
            "test:index:Thing", f"{name}-thing", {"token": cfg.require_secret("token"), "note": "plain"},
            pulumi.ResourceOptions(parent=self, protect=True, ignore_changes=["note"]),
        )
        self.register_outputs({"size": cfg.require_int("size")})

outer = Box("outer")
inner = Box("inner", pulumi.ResourceOptions(parent=outer))
after = pulumi.CustomResource("test:index:Thing", "after", {"ref": outer.inner.id},
                              pulumi.ResourceOptions(depends_on=[inner]))
if cfg.get_bool("fail"):
    raise pulumi.RunError("told to fail")
pulumi.export("size", cfg.require_int("size"))
'''


def make_project(tmp_path: Path, stack_config: str) -> Path:
    (tmp_path / "Pulumi.yaml").write_text(textwrap.dedent("""\
        name: boxes
        runtime: python
        config:
          size: {type: integer, default: 3}
    """))
    (tmp_path / "Pulumi.dev.yaml").write_text(textwrap.dedent(stack_config))
    (tmp_path / "__main__.py").write_text(PROGRAM)
    return tmp_path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path, """\
        config:
          boxes:token:
            secure: v1:bm9uY2U=:Y2lwaGVydGV4dA==
    """)


def test_should_take_defaults_from_pulumi_yaml_and_secrets_from_the_stack_file(project: Path) -> None:
    config = load_stack_config(project, "dev")
    assert config.values["boxes:size"] == "3"
    assert config.secret_keys == {"boxes:token"}
    assert config.project_values() == ({"size": "3", "token": config.values["boxes:token"]}, {"token"})


def test_should_build_urns_from_the_whole_parent_type_chain(project: Path) -> None:
    graph = run_program(project, "dev")
    assert sorted(graph.resources) == sorted([
        "urn:pulumi:dev::boxes::pulumi:pulumi:Stack::boxes-dev",
        "urn:pulumi:dev::boxes::test:box:Box::outer",
        "urn:pulumi:dev::boxes::test:box:Box$test:index:Thing::outer-thing",
        "urn:pulumi:dev::boxes::test:box:Box$test:box:Box::inner",
        "urn:pulumi:dev::boxes::test:box:Box$test:box:Box$test:index:Thing::inner-thing",
        "urn:pulumi:dev::boxes::test:index:Thing::after",
    ])
    inner_thing = "urn:pulumi:dev::boxes::test:box:Box$test:box:Box$test:index:Thing::inner-thing"
    assert [r.name for r in graph.ancestors(inner_thing)] == ["inner", "outer", "boxes-dev"]


def test_should_record_dependencies_options_and_outputs(project: Path) -> None:
    graph = run_program(project, "dev")
    after = graph.resources["urn:pulumi:dev::boxes::test:index:Thing::after"]
    outer_thing = "urn:pulumi:dev::boxes::test:box:Box$test:index:Thing::outer-thing"
    inner_thing = "urn:pulumi:dev::boxes::test:box:Box$test:box:Box$test:index:Thing::inner-thing"
    # The SDK sends a dependency on a component as its custom descendants, as the engine sees it; in a set, so the
    # graph keeps them sorted (a plan written twice is byte-identical).
    assert after.dependencies == sorted([inner_thing, outer_thing])
    assert after.property_dependencies == {"ref": [outer_thing]}
    assert after.parent == graph.stack_urn
    thing = graph.resources[outer_thing]
    assert thing.options == {"protect": True, "ignore_changes": ["note"]}
    assert graph.resources["urn:pulumi:dev::boxes::test:box:Box::outer"].outputs == {"size": 3.0}
    assert graph.stack_outputs == {"size": 3.0}


def test_should_keep_secrets_secret(project: Path) -> None:
    graph = run_program(project, "dev")
    thing = graph.resources["urn:pulumi:dev::boxes::test:box:Box$test:index:Thing::outer-thing"]
    assert thing.inputs == {"token": Secret(), "note": "plain"}
    assert "not decrypted" not in repr(graph.resources)


def test_should_report_a_failing_program_with_what_it_registered(tmp_path: Path) -> None:
    project = make_project(tmp_path, """\
        config:
          boxes:token: {secure: v1:bm9uY2U=:Y2lwaGVydGV4dA==}
          boxes:fail: "true"
    """)
    with pytest.raises(ProgramError, match="told to fail") as caught:
        run_program(project, "dev")
    assert "urn:pulumi:dev::boxes::test:index:Thing::after" in caught.value.registered


def test_should_run_the_program_without_collection_and_collect_again_after(tmp_path: Path) -> None:
    project = make_project(tmp_path, "config:\n  boxes:token: plain\n")
    (project / "__main__.py").write_text("import gc\nimport pulumi\npulumi.export('collecting', gc.isenabled())\n")
    assert gc.isenabled()
    assert run_program(project, "dev").stack_outputs == {"collecting": False}
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    (project / "__main__.py").write_text("raise RuntimeError('broken program')\n")
    with pytest.raises(ProgramError, match="broken program"):
        run_program(project, "dev")
    assert gc.isenabled()


def test_should_leave_no_reference_cycle_per_output_and_give_the_sdk_its_own_function_back(tmp_path: Path) -> None:
    project = make_project(tmp_path, "config:\n  boxes:token: plain\n")
    # The last Output settles after the 200 before it: the collector, run by hand there, counts what they left.
    (project / "__main__.py").write_text(textwrap.dedent("""\
        import gc
        import pulumi
        last = pulumi.Output.from_input("start")
        for i in range(200):
            thing = pulumi.CustomResource("test:index:Thing", f"thing-{i}", {"after": last, "n": [i, {"k": last}]})
            last = thing.id.apply(lambda id_, i=i: f"{id_}:{i}")
        pulumi.export("unreachable", last.apply(lambda _: gc.collect()))
    """))
    sdk = rpc.contains_unknowns
    # The SDK's contains_unknowns left 22,861 unreachable objects here (a cycle of 6 per call).
    assert run_program(project, "dev").stack_outputs["unreachable"] < 100
    assert rpc.contains_unknowns is sdk


def address_free_repr(value: object) -> str:
    """repr without object addresses: every pytest-xdist worker must collect the same test ids."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))


@pytest.mark.parametrize("value", [
    None, 3, "text", [], {}, Unknown(), [1, [2, [3, Unknown()]]], {"a": {"b": [{"c": Unknown()}]}},
    {"a": [1, 2], "b": {"c": "d"}}, [{"x": 1}] * 3, {"keys": Unknown()}, [Unknown()] * 2,
    # An output type: a dict whose `values` is a field, not dict.values.
    LabelSelectorRequirement(key="k", operator="In", values=[Unknown()]),
    LabelSelectorRequirement(key="k", operator="In", values=["v"]),
], ids=address_free_repr)
def test_should_find_unknowns_where_the_sdk_finds_them(value: object) -> None:
    assert _contains_unknowns(value) is rpc.contains_unknowns(value)


def test_should_find_unknowns_in_a_container_that_holds_itself() -> None:
    looped: list[object] = [1]
    looped.append(looped)
    assert _contains_unknowns(looped) is rpc.contains_unknowns(looped) is False
    looped.append({"late": Unknown()})
    assert _contains_unknowns(looped) is rpc.contains_unknowns(looped) is True


# The SDK's trace starts below the third __init__ on the stack (Resource's, its subclass's, the concrete class's).
TRACED = """\
from pulumi.runtime import resource

class Resource:
    def __init__(self):
        self.frames = len(resource._get_stack_trace().frames)

class Custom(Resource):
    def __init__(self):
        super().__init__()

class Thing(Custom):
    def __init__(self):
        super().__init__()

def declare():
    return Thing()

frames = declare().frames
"""


def test_should_take_no_stack_trace_of_a_registration_and_give_the_sdk_its_own_back(tmp_path: Path) -> None:
    project = make_project(tmp_path, "config:\n  boxes:token: plain\n")
    (project / "__main__.py").write_text(f"import pulumi\n{TRACED}pulumi.export('frames', frames)\n")
    sdk = sdk_resource._get_stack_trace
    outside: dict[str, object] = {}
    exec(TRACED, outside)
    assert isinstance(outside["frames"], int) and outside["frames"] >= 1  # what the SDK's own takes
    assert run_program(project, "dev").stack_outputs == {"frames": 0}
    assert sdk_resource._get_stack_trace is sdk


def test_should_wait_for_every_output_and_raise_what_one_raised(tmp_path: Path) -> None:
    project = make_project(tmp_path, "config:\n  boxes:token: plain\n")
    # Each resource's input waits on the last one's id: the outputs finish one after another, as a plan's do.
    (project / "__main__.py").write_text(textwrap.dedent("""\
        import pulumi
        last = pulumi.Output.from_input("start")
        for i in range(200):
            thing = pulumi.CustomResource("test:index:Thing", f"thing-{i}", {"after": last})
            last = thing.id.apply(lambda id_, i=i: f"{id_}:{i}")
        pulumi.export("last", last)
    """))
    graph = run_program(project, "dev")
    assert len(graph.resources) == 201 and str(graph.stack_outputs["last"]).endswith(":199")
    (project / "__main__.py").write_text("import pulumi\npulumi.Output.from_input(1).apply(lambda v: v / 0)\n")
    with pytest.raises(ProgramError, match="division by zero"):
        run_program(project, "dev")


@pytest.mark.parametrize(
    ("stack_file", "message"),
    [
        pytest.param(None, "no stack file Pulumi.dev.yaml", id="rejects a missing stack file"),
        pytest.param("config: [unclosed", "Pulumi.dev.yaml: not valid YAML", id="rejects broken YAML"),
        pytest.param("config:\n  size: 3\n", "config key 'size' needs a namespace, e.g. boxes:size",
                     id="rejects a key without namespace"),
    ],
)
def test_should_deny_unreadable_stack_files(tmp_path: Path, stack_file: str | None, message: str) -> None:
    project = make_project(tmp_path, stack_file or "")
    if stack_file is None:
        (project / "Pulumi.dev.yaml").unlink()
    with pytest.raises(StackConfigError, match=message):
        load_stack_config(project, "dev")
