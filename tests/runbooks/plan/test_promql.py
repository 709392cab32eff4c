"""The walk over PromQL that the metrics-have-producers invariant reads selectors with, against promql_parser's own
walk on every query the prod stack runs."""

import time
from typing import Any

import promql_parser
import pytest

from components.supplied import operator_supplied
from runbooks.offline.engine import run_program
from runbooks.plan import promql
from runbooks.plan.invariants import metric_reads
from runbooks.plan.plan import host_installs, kubernetes_objects
from runbooks.plan.producers import Deployed
from runbooks.plan.promql import selectors
from tests.builders import REPO, parse, prod_values

EDGE_CASES = (
    'rate(a{x="1"}[5m])',
    "topk(scalar(b), c)",
    "max_over_time(d[5m:1m] offset 1m)",
    "-e",
    'count_values("v", f)',
    "quantile(0.9, g) + on(x) group_left h",
    'label_replace(i, "a", "$1", "b", "(.*)")',
    '{__name__=~"j|k", l!="m"} unless (n)',
    "sum by (o) (p) / ignoring(q) r @ 100",
)


def selectors_by_walk(expr: str) -> list[str]:
    """What promql_parser's own walk finds, as text: the reference the plan's walk must match."""
    found: list[str] = []

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node.prettify())
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def prod_queries() -> list[str]:
    graph = run_program(REPO, "prod")
    registered = list(kubernetes_objects(graph).values())
    deployed = Deployed(registered, registered, host_installs(graph), supplied=operator_supplied(parse(prod_values())))
    return [expr for _, expr in metric_reads(deployed)]


@pytest.mark.parametrize("expr", [*EDGE_CASES, *prod_queries()])
def test_should_find_the_selectors_promql_parsers_walk_finds_in_its_order(expr: str) -> None:
    assert [s.prettify() for s in selectors(expr)] == selectors_by_walk(expr)


def test_should_read_a_long_or_chain_in_linear_time() -> None:
    # DcgmExporterDown at 8,192 GPUs is 1,024 `absent(...) or` terms; promql_parser.walk took 34 s for 256 of them
    # (cubic: 3.5 s for 128), this walk 0.07 s. The bound leaves room for a loaded machine, not for walk.
    expr = " or ".join(f'absent(DCGM_FI_DEV_GPU_TEMP{{Hostname="gpu-{i:04d}"}})' for i in range(256))
    started = time.process_time()
    found = [s.matchers.matchers[0].value for s in selectors(expr)]
    assert found == [f"gpu-{i:04d}" for i in range(256)]
    assert time.process_time() - started < 5.0


def test_should_name_a_promql_node_whose_operands_it_does_not_know(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(promql, "_OPERANDS", tuple(o for o in promql._OPERANDS if o[0] is not promql_parser.Call))
    with pytest.raises(TypeError, match="PromQL node Call in 'rate"):
        selectors('rate(a{x="1"}[5m])')
