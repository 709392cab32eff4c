"""The series a PromQL query selects, read from promql_parser's syntax tree."""

from collections.abc import Callable
from typing import Any

import promql_parser

_OPERANDS: tuple[tuple[type, Callable[[Any], list[Any]]], ...] = (
    (promql_parser.BinaryExpr, lambda node: [node.lhs, node.rhs]),
    (
        promql_parser.AggregateExpr,
        lambda node: [node.param, node.expr] if isinstance(node.param, promql_parser.Expr) else [node.expr],
    ),
    (promql_parser.UnaryExpr, lambda node: [node.expr]),
    (promql_parser.ParenExpr, lambda node: [node.expr]),
    (promql_parser.SubqueryExpr, lambda node: [node.expr]),
    (promql_parser.MatrixSelector, lambda node: [node.vector_selector]),
    (promql_parser.Call, lambda node: list(node.args)),
    (promql_parser.NumberLiteral, lambda node: []),
    (promql_parser.StringLiteral, lambda node: []),
)
"""Each kind of PromQL node (promql_parser's __init__.pyi) and the expressions it holds, in the order
promql_parser.walk visits them."""


def selectors(expr: str) -> list[promql_parser.VectorSelector]:
    """Every vector selector in expr, in promql_parser.walk's order (depth first, left to right).

    Not walk itself: it takes cubic time in the depth of the tree. A rule of 256 `absent(...) or` terms took it 34 s
    (128 terms 3.5 s), and DcgmExporterDown has 1,024 at 8,192 GPUs: most of the 712 s `gpuctl plan --chart-mirror`
    took there. Reading the operands here is linear (0.07 s for 256 terms)."""
    found: list[promql_parser.VectorSelector] = []
    todo: list[Any] = [promql_parser.parse(expr)]
    while todo:
        node = todo.pop()
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)
            continue
        operands = next((of(node) for kind, of in _OPERANDS if isinstance(node, kind)), None)
        if operands is None:
            raise TypeError(f"PromQL node {type(node).__name__} in {expr!r}: its operands are unknown here")
        todo += reversed(operands)
    return found
