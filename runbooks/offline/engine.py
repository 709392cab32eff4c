"""The offline engine: run `__main__.py` for a stack under Pulumi's mocks, the way the engine would.

Config comes from Pulumi.yaml defaults and Pulumi.<stack>.yaml, handed to the program as strings
(objects JSON-encoded) like the CLI does; `secure:` values stay secret and are never decrypted
(the program gets a placeholder marked secret). URNs follow the engine's rule (the parent's full
type chain, without the root Stack's type). Each registration is recorded as the engine sees it:
parent, dependencies, property dependencies, options, inputs and outputs, secrets kept as
`Secret` markers so no plaintext can leak into the plan.
"""

import asyncio
import gc
import json
import re
import runpy
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import known_types, mocks, rpc, settings
from pulumi.runtime import resource as sdk_resource
from pulumi.runtime.config import set_all_config
from pulumi.runtime.proto import source_pb2
from pulumi.runtime.stack import run_in_stack
from pulumi.runtime.sync_await import _ensure_event_loop

from runbooks.children import missing_module

STACK_TYPE = "pulumi:pulumi:Stack"
SECRET_PLACEHOLDER = "offline-plan: secret not decrypted"


class StackConfigError(Exception):
    """Pulumi.yaml or the stack file cannot be read."""


class ProgramError(Exception):
    """The program raised; `registered` is what it had registered by then (the engine's view)."""

    def __init__(self, message: str, registered: dict[str, "Resource"]) -> None:
        super().__init__(message)
        self.registered = registered


class Secret:
    """Stands for a secret value in a recorded graph; the value itself is never kept."""

    def __repr__(self) -> str:
        return "[secret]"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret)

    def __hash__(self) -> int:
        return hash(Secret)


@dataclass(frozen=True)
class StackConfig:
    project: str
    values: dict[str, str]
    """Full keys (`gpu-cluster:racks`) to the strings the CLI would hand the program."""
    secret_keys: frozenset[str]

    def project_values(self) -> tuple[dict[str, str], set[str]]:
        """The project's own keys without their namespace, and which of them are secret."""
        prefix = f"{self.project}:"
        values = {k[len(prefix):]: v for k, v in self.values.items() if k.startswith(prefix)}
        return values, {k[len(prefix):] for k in self.secret_keys if k.startswith(prefix)}


@dataclass
class Resource:
    urn: str
    type: str
    name: str
    custom: bool
    parent: str
    inputs: dict[str, Any]
    outputs: dict[str, Any] = field(default_factory=dict)
    dependencies: list[str] = field(default_factory=list)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    """provider, protect, version, ignore_changes, ... as sent in RegisterResource (set ones only)."""


@dataclass
class ResourceGraph:
    project: str
    stack: str
    resources: dict[str, Resource]
    """By URN, in registration order."""

    @property
    def stack_urn(self) -> str:
        return f"urn:pulumi:{self.stack}::{self.project}::{STACK_TYPE}::{self.project}-{self.stack}"

    @property
    def stack_outputs(self) -> dict[str, Any]:
        return self.resources[self.stack_urn].outputs

    def of_type(self, type_: str) -> list[Resource]:
        return [r for r in self.resources.values() if r.type == type_]

    def ancestors(self, urn: str) -> Iterator[Resource]:
        parent = self.resources[urn].parent
        while parent:
            yield self.resources[parent]
            parent = self.resources[parent].parent


def load_stack_config(project_dir: Path, stack: str) -> StackConfig:
    project_file = _read_yaml(project_dir / "Pulumi.yaml")
    project = _project_name(project_dir, project_file)
    values: dict[str, str] = {}
    for key, decl in (project_file.get("config") or {}).items():
        full = key if ":" in key else f"{project}:{key}"
        if isinstance(decl, dict) and ("default" in decl or "value" in decl):
            values[full] = _as_config_string(decl.get("value", decl.get("default")))
        elif not isinstance(decl, dict):
            values[full] = _as_config_string(decl)
    stack_path = project_dir / f"Pulumi.{stack}.yaml"
    if not stack_path.exists():
        raise StackConfigError(f"no stack file {stack_path.name} in {project_dir}")
    secret_keys = set()
    for key, value in (_read_yaml(stack_path).get("config") or {}).items():
        if ":" not in key:
            raise StackConfigError(f"{stack_path.name}: config key {key!r} needs a namespace, e.g. {project}:{key}")
        if isinstance(value, dict) and set(value) == {"secure"}:
            values[key] = SECRET_PLACEHOLDER
            secret_keys.add(key)
        else:
            values[key] = _as_config_string(value)
    return StackConfig(project, values, frozenset(secret_keys))


def project_name(project_dir: Path) -> str:
    """The project's name, as Pulumi.yaml gives it."""
    return _project_name(project_dir, _read_yaml(project_dir / "Pulumi.yaml"))


def _project_name(project_dir: Path, project_file: dict[str, Any]) -> str:
    project = project_file.get("name")
    if not isinstance(project, str):
        raise StackConfigError(f"{project_dir / 'Pulumi.yaml'}: `name` is missing")
    return project


def run_program(project_dir: Path, stack: str, config: StackConfig | None = None,
                on_register: Callable[[Resource], None] | None = None) -> ResourceGraph:
    """Run the project's `__main__.py` for `stack` under mocks and return what it registered; on_register is called
    with each resource as it is recorded (from the SDK's threads), so work on it can start while the program runs.

    An error the program raises (a RunError for an invalid spec) becomes a ProgramError carrying
    its message, as the CLI would print it, and what had been registered when it was raised.
    """
    config = config or load_stack_config(project_dir, stack)
    monitor = _RecordingMonitor(_Mocks(), on_register)
    set_all_config(dict(config.values), list(config.secret_keys))
    mocks.set_mocks(monitor.mocks, project=config.project, stack=stack, preview=False, monitor=monitor)
    settings.ROOT.set(None)  # set_mocks made a root Stack already; the program gets its own, as under the CLI
    settings.SETTINGS.rpc_manager.clear()
    settings.SETTINGS.outputs.clear()

    async def program() -> None:
        runpy.run_path(str(project_dir / "__main__.py"), run_name="__main__")
        await _settle_outputs()

    sys.path.insert(0, str(project_dir))
    loop = asyncio.new_event_loop()
    try:
        # Two SDK functions (pulumi 3.272) are swapped for the run (docs/offline-engine.md). A plan records no source
        # positions: the SDK's walk of the stack at every registration, each frame below the resource's constructor
        # made a file URI (20 a resource), was 9 % of the plan's CPU at 1,024 GPUs; the run gets the empty trace the
        # SDK sends when it finds no constructor frame.
        with no_collection(), _swapped(rpc, "contains_unknowns", _contains_unknowns), \
                _swapped(sdk_resource, "_get_stack_trace", source_pb2.StackTrace):
            loop.run_until_complete(run_in_stack(program))
    except ModuleNotFoundError as error:
        raise ProgramError(missing_module(error.name or str(error)), monitor.recorded()) from error
    except Exception as error:
        raise ProgramError(str(error), monitor.recorded()) from error
    finally:
        loop.close()
        sys.path.remove(str(project_dir))
    return ResourceGraph(config.project, stack, monitor.recorded())


async def _settle_outputs() -> None:
    """Wait for every Output task the program left running, each once, before the SDK's own wait.

    The SDK (pulumi 3.272, runtime/stack.py wait_for_rpcs) waits for them with `asyncio.wait(FIRST_COMPLETED)` in a
    loop: every round adds and removes a callback on each pending task, so N tasks finishing one by one cost N^2
    (18 % of the plan's CPU at 1,024 GPUs). Here each round waits for all of them together (new ones started
    meanwhile make the next round); then the first exception a task raised fails the program, as in the SDK's wait
    (gather reads every task's outcome, so none is reported as never retrieved), and finished tasks are let go.
    """
    while True:
        with settings.SETTINGS.lock:
            pending = list(settings.SETTINGS.outputs)
            settings.SETTINGS.outputs.clear()
        if not pending:
            return
        await asyncio.wait(pending)
        await asyncio.gather(*pending)


@contextmanager
def no_collection() -> Iterator[None]:
    """Run without the cyclic garbage collector, then collect as before.

    A program run allocates hundreds of thousands of objects (resources, Outputs, futures, protobuf messages) that
    all live until the run ends; each of the collector's passes walks them to free almost nothing, and took 58-72 %
    of the run's CPU at 1,024 and 8,192 GPUs (issue 22). What exists before is frozen (never garbage), nothing
    is collected meanwhile, and collection resumes after, as the caller had it, so the plan's later steps and the
    process that runs several programs collect normally. The policy pack's client runs so too: its requests would
    otherwise have the collector walk the plan's graph (0.9 s of a 6.9 s pack at 8,192 GPUs).
    """
    collecting = gc.isenabled()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if collecting:
            gc.enable()


@contextmanager
def _swapped(module: Any, name: str, replacement: Any) -> Iterator[None]:
    """`module.name` is `replacement` meanwhile, and what it was after."""
    original = getattr(module, name)
    setattr(module, name, replacement)
    try:
        yield
    finally:
        setattr(module, name, original)


def _contains_unknowns(val: Any) -> bool:
    """rpc.contains_unknowns without recursion (its parameter's name too): whether an Unknown is `val` or in its dicts
    and lists, each container looked into once.

    Without the collector, every reference cycle made during a run stays until it ends. The SDK's makes one on each
    call (its recursive inner `impl` holds itself through its closure cell), and every Output's result calls it:
    38,800 cycles at 1,024 GPUs, 70 MiB of the peak at 8,192. This one gives the same answer and makes none.
    """
    seen: set[int] = set()
    pending = [val]
    while pending:
        current = pending.pop()
        if known_types.is_unknown(current):
            return True
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, dict):
            # By key, as the SDK: output types are dicts whose `values` may be a field (LabelSelectorRequirement).
            pending.extend(current[key] for key in current)
        elif isinstance(current, list):
            pending.extend(current)
    return False


MAX_STACK_FILE_BYTES = 1 << 20
"""A site's stack file is tens of kB; anything over 1 MiB is not one."""


_BOOL = "tag:yaml.org,2002:bool"


class _StrictLoader(yaml.SafeLoader):
    """YAML as a stack file may be: no aliases (a few hundred bytes of them expand to gigabytes), no duplicate keys
    (the last one would win without a word), booleans as the Pulumi CLI reads them (YAML 1.2: `true` and `false`;
    YAML 1.1's `yes`, `no`, `on`, `off` stay strings instead of becoming 1 and 0 in a number field), and no number
    of more digits than Python converts (a ValueError, not a YAML error)."""

    yaml_implicit_resolvers = {
        first: [(tag, pattern) for tag, pattern in resolvers if tag != _BOOL]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError as error:
            raise yaml.MarkedYAMLError(None, None, str(error).split(":")[0], node.start_mark) from None

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):  # type: ignore[no-untyped-call]
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.MarkedYAMLError(None, None, "aliases are not allowed in a stack file", event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.MarkedYAMLError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_implicit_resolver(  # type: ignore[no-untyped-call]
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        if path.stat().st_size > MAX_STACK_FILE_BYTES:
            raise StackConfigError(f"{path.name}: {path.stat().st_size} bytes, over the {MAX_STACK_FILE_BYTES} a stack "
                                   "file may have")
        data = yaml.load(path.read_text(), Loader=_StrictLoader)  # noqa: S506 (a SafeLoader, made stricter)
    except FileNotFoundError:
        raise StackConfigError(f"{path} does not exist") from None
    except yaml.YAMLError as err:
        raise StackConfigError(f"{path.name}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise StackConfigError(f"{path.name}: expected a mapping at the top level")
    if not isinstance(data.get("config") or {}, dict):
        raise StackConfigError(f"{path.name}: `config` must be a mapping of keys to values")
    return data


def _as_config_string(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _plain(value: Any) -> Any:
    """Recorded form of a deserialized property: secrets become `Secret`, resources their URN."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return Secret()
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, pulumi.FileAsset | pulumi.FileArchive):
        return {"asset": value.path}
    if isinstance(value, pulumi.StringAsset):
        return {"asset_text": value.text}
    if hasattr(value, "urn") and hasattr(value.urn, "future"):
        return f"[resource {type(value).__name__}]"
    return value


class _Mocks(mocks.Mocks):
    def __init__(self) -> None:
        # The inputs the MockMonitor deserialized for the resource this thread registers: recorded from there, not
        # deserialized a second time (a copy of every input, and its CPU, at 8,192 GPUs).
        self.seen = threading.local()

    def new_resource(self, args: mocks.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.seen.inputs = args.inputs
        if not args.custom:
            return None, {}
        state = dict(args.inputs)
        # The Kubernetes provider names objects itself when metadata.name is absent; mirror it.
        if args.typ.startswith("kubernetes:") and isinstance(state.get("metadata"), dict):
            state["metadata"] = {"name": args.name, **state["metadata"]}
        return f"{args.name}-id", state

    def call(self, args: mocks.MockCallArgs) -> tuple[dict[str, Any], None]:
        raise NotImplementedError(f"the offline engine answers no invokes; {args.token} was called")


class _RecordingMonitor(mocks.MockMonitor):
    def __init__(self, mocks_: _Mocks, on_register: Callable[[Resource], None] | None = None) -> None:
        super().__init__(mocks_)
        self._seen = mocks_.seen
        self._on_register = on_register
        self._lock = threading.Lock()
        self._records: dict[str, Resource] = {}

    def recorded(self) -> dict[str, Resource]:
        with self._lock:
            return dict(self._records)

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        # The engine qualifies a type with its parent's whole type chain, except the root Stack's.
        if parent:
            parent_type = parent.split("::")[2]
            if parent_type != STACK_TYPE:
                type_ = f"{parent_type}${type_}"
        return f"urn:pulumi:{settings.get_stack()}::{settings.get_project()}::{type_}::{name}"

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        self._seen.inputs = None
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        _ensure_event_loop()  # type: ignore[no-untyped-call]
        seen = self._seen.inputs  # None for the Stack, which the MockMonitor answers itself
        inputs = _plain(rpc.deserialize_properties(request.object) if seen is None else seen)
        # A custom resource's outputs are the state the mocks made, which the MockMonitor keeps.
        outputs = _plain(self.resources[response.urn].state) if request.custom else {}
        record = Resource(
            urn=response.urn,
            type=request.type,
            name=request.name,
            custom=request.custom,
            parent=request.parent,
            inputs=inputs,
            outputs=outputs,
            # The SDK gathers dependencies in sets, so their order changes from run to run; the engine reads them
            # as sets. Sorted, the recorded graph (and every file a plan writes from it) is the same each run.
            dependencies=sorted(request.dependencies),
            property_dependencies={k: sorted(v.urns) for k, v in sorted(request.propertyDependencies.items())},
            options=_options(request),
        )
        with self._lock:
            self._records[record.urn] = record
        if self._on_register is not None:
            self._on_register(record)
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        _ensure_event_loop()  # type: ignore[no-untyped-call]
        outputs = _plain(rpc.deserialize_properties(request.outputs))
        with self._lock:
            self._records[request.urn].outputs = outputs
        return super().RegisterResourceOutputs(request)  # type: ignore[no-untyped-call]


def _options(request: Any) -> dict[str, Any]:
    options = {
        "provider": request.provider,
        "protect": request.protect if request.HasField("protect") else None,
        "version": request.version,
        "ignore_changes": list(request.ignoreChanges),
        "replace_on_changes": list(request.replaceOnChanges),
        "additional_secret_outputs": list(request.additionalSecretOutputs),
        "delete_before_replace": request.deleteBeforeReplace,
        "retain_on_delete": request.retainOnDelete if request.HasField("retainOnDelete") else None,
        "deleted_with": request.deletedWith,
        "custom_timeouts": {
            k: getattr(request.customTimeouts, k) for k in ("create", "update", "delete")
            if getattr(request.customTimeouts, k)
        },
    }
    return {k: v for k, v in options.items() if v not in (None, "", [], {}, False)}
