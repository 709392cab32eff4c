"""Helm's output read, and helm/*.yaml written, with libyaml: the objects and the bytes PyYAML's pure-Python loader and
emitter give, at libyaml's speed. Imports nothing of the project, so the plan's worker processes start in 0.1 s."""

import io
import pickle
import re
import secrets
from typing import Any

import yaml


class _Loader(yaml.CSafeLoader):
    """YAML 1.1 as Helm's output uses it: CRDs may hold `=`, the spec's "value" tag, as a plain string.

    libyaml's parser under PyYAML's own safe constructor: the same objects as yaml.SafeLoader (a test compares them
    on every chart the stack renders) in a sixth of the CPU; the pure-Python parser was half of `gpuctl plan
    --chart-mirror` on prod (11 s of CPU)."""


def _plain_value(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))


_Loader.add_constructor("tag:yaml.org,2002:value", _plain_value)


def parse(printed: str) -> list[dict[str, Any]]:
    """The objects in what `helm template` printed (its empty documents left out)."""
    return [o for o in yaml.load_all(printed, Loader=_Loader) if isinstance(o, dict)]


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


def dump_pickled(documents: bytes) -> str:
    """dump_all of pickled documents: what a worker process is sent, a snapshot of the documents as they were."""
    return dump_all(pickle.loads(documents))


def _double_quoted(text: str, column: int, indent: int) -> str:
    """What PyYAML's emitter writes for a double-quoted block value starting at this column, with this indent."""
    stream = io.StringIO()
    emitter = yaml.emitter.Emitter(stream)  # safe_dump's defaults: width 80, ASCII only
    emitter.column, emitter.indent, emitter.whitespace = column, indent, True
    emitter.write_double_quoted(text, split=True)
    return stream.getvalue()
