"""Helm's output read with libyaml, and the YAML the plan writes itself written with it: the objects and the bytes
PyYAML's pure-Python loader and emitter give, at libyaml's speed. Imports nothing of the project."""

import io
import re
import secrets
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import yaml

_STR, _MAP, _SEQ = (f"tag:yaml.org,2002:{name}" for name in ("str", "map", "seq"))
_FLATTENED = frozenset({"tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"})
"""The keys SafeConstructor.flatten_mapping rewrites."""


class _Loader(yaml.CSafeLoader):
    """YAML 1.1 as Helm's output uses it: CRDs may hold `=`, the spec's "value" tag, as a plain string.

    libyaml's parser under PyYAML's safe constructor (its strings, mappings and sequences built here, as it builds
    them): the same objects as yaml.SafeLoader (a test compares them on every chart the stack renders and on merges,
    aliases and tags) in a sixth of the CPU; the pure-Python parser was half of `gpuctl plan
    --chart-mirror` on prod (11 s of CPU)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.values: list[tuple[int, int]] = []
        """Where each value-tagged scalar the constructor read lies in the stream (libyaml's marks: characters)."""

    def construct_document(self, node: yaml.Node) -> Any:
        """The document's object as SafeConstructor.construct_document builds it, with strings, mappings and
        sequences built here: PyYAML's construct_object (its bookkeeping, a generator for each mapping and sequence)
        was half of the parse, 0.63 of 1.29 s of CPU for prod's charts, 0.36 s this way. Every other node (numbers,
        booleans, nulls, timestamps, other tags) goes to PyYAML's own constructor; a mapping with a merge (`<<`) or
        value (`=`) key is first flattened as PyYAML flattens it."""
        built: dict[yaml.Node, Any] = {}  # what an alias reads: the same object, as PyYAML gives it
        scalar, mapping_node, sequence_node = yaml.ScalarNode, yaml.MappingNode, yaml.SequenceNode

        def build(node: yaml.Node) -> Any:
            if node in built:
                return built[node]
            tag = node.tag
            if tag == _STR and type(node) is scalar:
                return node.value
            if tag == _MAP and type(node) is mapping_node:
                mapping = built[node] = {}
                for key_node, _ in node.value:
                    if key_node.tag in _FLATTENED:
                        self.flatten_mapping(node)
                        break
                for key_node, value_node in node.value:
                    key = key_node.value if key_node.tag == _STR and type(key_node) is scalar else build(key_node)
                    if not isinstance(key, Hashable):
                        raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                                "found unhashable key", key_node.start_mark)
                    mapping[key] = build(value_node)
                return mapping
            if tag == _SEQ and type(node) is sequence_node:
                sequence = built[node] = []
                sequence.extend(build(item) for item in node.value)
                return sequence
            return self.construct_object(node)  # type: ignore[no-untyped-call]

        try:
            data = build(node)
            while self.state_generators:  # what PyYAML's constructors left to fill in, as construct_document does
                generators, self.state_generators = self.state_generators, []
                for generator in generators:
                    for _ in generator:
                        pass
            return data
        finally:
            self.constructed_objects, self.recursive_objects, self.deep_construct = {}, {}, False


def _plain_value(loader: _Loader, node: yaml.ScalarNode) -> str:
    loader.values.append((node.start_mark.index, node.end_mark.index))
    return str(loader.construct_scalar(node))


_Loader.add_constructor("tag:yaml.org,2002:value", _plain_value)


@dataclass(frozen=True)
class Document:
    """An object's document as Helm printed it."""

    text: str
    """From the end of the document before it: Helm's `---` and `# Source:` lines, then the object as the chart's
    template wrote it, but each plain `=` written `'='`. PyYAML's safe loader has no constructor for the "value" tag
    a plain `=` resolves to and fails on it; quoted, every YAML 1.1 loader reads the string "=", as the plan does."""
    head: int
    """Where the object starts in text: what comes before it is Helm's `---` and `# Source:` lines."""

    def rewritten(self, obj: dict[str, Any]) -> "Document":
        """The same document holding obj as PyYAML writes it (dump_all), under Helm's lines."""
        head = self.text[:self.head]
        return Document(head + dump_all([obj]), len(head))


@dataclass(frozen=True)
class Parsed:
    """The objects in what `helm template` printed (its empty documents left out), and each one's document."""

    objects: list[dict[str, Any]]
    documents: list[Document]


def parse(printed: str) -> Parsed:
    """What `helm template` printed, read: each document's object with its text.

    libyaml's marks give each document's place: a block mapping ends where the next document's `---` starts, a flow
    one at its `}` (its document then ends with its line), so the documents' texts, one after the other, are the
    printed stream. Documents that hold no object (Helm's `# Source:` line before a CRD file that starts with its own
    `---`, a template that renders comments only) are left out. A document whose "value" scalar is not a bare `=`
    (anchored or tagged: no chart here has one) is written by PyYAML."""
    loader = _Loader(printed)
    objects, documents, start = [], [], 0
    try:
        while loader.check_node():
            node = loader.get_node()
            assert node is not None  # check_node() said there is one
            obj = loader.construct_document(node)
            end = node.end_mark.index if node.end_mark.column == 0 else printed.find("\n", node.end_mark.index) + 1 \
                or len(printed)
            if isinstance(obj, dict):
                document = _quoted(printed, start, node.start_mark.index, end, loader.values)
                objects.append(obj)
                documents.append(document if document is not None else
                                 Document(printed[start:end], node.start_mark.index - start).rewritten(obj))
            loader.values.clear()
            start = end
    finally:
        loader.dispose()
    return Parsed(objects, documents)


def _quoted(printed: str, start: int, head: int, end: int, values: list[tuple[int, int]]) -> Document | None:
    """The document printed[start:end] with each plain `=` at values quoted; None where one is not a bare `=`."""
    pieces, at = [], start
    for value_start, value_end in sorted(values):
        if printed[value_start:value_end] != "=":
            return None
        pieces += [printed[at:value_start], "'='"]
        at = value_end
    return Document("".join([*pieces, printed[at:end]]), head - start)


_DOUBLE_QUOTED = re.compile(r"[^\n -~]| \n|\n ")
"""What makes PyYAML's emitter double-quote a string (Emitter.analyze_scalar): a character other than printable ASCII
and line breaks, a space before a line break or a space after one."""
_INDICATORS = re.compile(r"(?: |- |: )*")
"""What a line holds before a block mapping's key, or before a sequence item or the value of a complex key:
indentation, sequence dashes, and the colon of a key too long to be simple."""


def dump_all(documents: list[dict[str, Any]]) -> str:
    """The bytes `yaml.safe_dump_all(documents, sort_keys=False)` writes, in a fifth of its CPU.

    PyYAML's own emitter took a quarter of `gpuctl plan --chart-mirror` on prod (5 s of CPU). libyaml's
    (yaml.CSafeDumper) writes the same bytes, except where it folds a long double-quoted string: it breaks the line at
    a space, where PyYAML escapes the break (a `\\` at the line's end, `\\ ` for a space after it). Both read back as
    the same string, but a plan's files should not change with the emitter, so every string PyYAML would double-quote
    goes to libyaml as a placeholder, then replaced by what PyYAML's own writer writes at that column and indent; a
    test compares the bytes with PyYAML's on every chart the stack renders."""
    placeholder, quoted = f"pyyaml-double-quoted-{secrets.token_hex(8)}", list[str]()
    copies: dict[int, Any] = {}

    def hold(value: Any) -> Any:
        # Copies keep the documents as they are, and share what they share, so libyaml anchors what PyYAML would.
        if isinstance(value, str):
            if not _DOUBLE_QUOTED.search(value):
                return value
            quoted.append(value)
            return placeholder
        if isinstance(value, dict | list) and id(value) not in copies:
            copies[id(value)] = {k: hold(v) for k, v in value.items()} if isinstance(value, dict) else \
                [hold(v) for v in value]
        return copies.get(id(value), value)

    held = [hold(document) for document in documents]
    emitted = str(yaml.dump_all(held, Dumper=yaml.CSafeDumper, sort_keys=False))
    if not quoted:
        return emitted
    pieces, end = [], 0
    for found, text in zip(re.finditer(re.escape(placeholder), emitted), quoted, strict=True):
        line = emitted.rfind("\n", 0, found.start()) + 1
        lead = _INDICATORS.match(emitted, line, found.start())
        assert lead is not None  # the pattern matches the empty string
        # A sequence item's continuation lines (and a complex key's value's) align with it; a mapping value's are
        # indented past its key.
        indent = found.start() - line if lead.end() == found.start() else lead.end() - line + 2
        pieces += [emitted[end:found.start()], _double_quoted(text, found.start() - line, indent)]
        end = found.end()
    return "".join([*pieces, emitted[end:]])


def _double_quoted(text: str, column: int, indent: int) -> str:
    """What PyYAML's emitter writes for a double-quoted block value starting at this column, with this indent."""
    stream = io.StringIO()
    emitter = yaml.emitter.Emitter(stream)  # safe_dump's defaults: width 80, ASCII only
    emitter.column, emitter.indent, emitter.whitespace = column, indent, True
    emitter.write_double_quoted(text, split=True)
    return stream.getvalue()
