"""`gpuctl report` against a Prometheus (or whatever --prometheus-url names) and an sacct whose answers are hostile
(issue 41: they gave tracebacks): each is exit 1 with an error naming the query or the line, the place and the rule."""

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from runbooks.cli import app
from runbooks.report import prometheus
from tests.builders import REPO
from tests.harness.http_double import JsonHandler, Served

WEEK = "2020-11-08T00:00Z..2020-11-15T00:00Z"
WEEK_BEFORE = "2020-11-01T00:00Z..2020-11-08T00:00Z"
ONE = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1.0, "1"]}]}}


def matrix(*series: Any) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": list(series)}}).encode()


class Answers:
    """The range queries' answer the test sets; instant queries get `vector(1)`'s."""

    range_answer: bytes = b""


@pytest.fixture(scope="module")
def double() -> Iterator[str]:
    """The Prometheus double, one for the module: stopping one takes half a second (serve_forever's poll)."""

    class Handler(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.answer(200, Answers.range_answer if self.path.startswith("/api/v1/query_range") else ONE)

    served = Served(Handler)
    try:
        yield served.url
    finally:
        served.stop()


@pytest.fixture
def hostile(double: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The double's URL, with an sacct on PATH that prints no jobs, or the answer the test wrote."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text("#!/bin/sh\n[ -z \"$SACCT_ANSWER\" ] || cat \"$SACCT_ANSWER\"\n")
    (bin_dir / "sacct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return double


def report(tmp_path: Path, url: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["report", "--project-dir", str(REPO), "--out", str(tmp_path / "report"),
                                      "--window", WEEK, "--baseline", WEEK_BEFORE, "--prometheus-url", url])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize(("answer", "said"), [
    pytest.param(matrix({"metric": {}, "values": [[1.0, "abc"]]}), "with data.result[0].values[0][1] 'abc' is not a "
                 "number as text", id="a value that is no number"),
    pytest.param(matrix({"metric": "x", "values": []}), "with data.result[0].metric not labels of text",
                 id="labels that are no object"),
    pytest.param(matrix({"metric": {}}), "with data.result[0].values not a list", id="a series without values"),
    pytest.param(matrix({"metric": {}, "values": [[True, "1"]]}), "with data.result[0].values[0][0] 'True' not a "
                 "finite time in seconds", id="a time that is a boolean"),
    pytest.param(b"[1, 2]", "with a JSON list, not an object", id="an answer that is a list"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "with no JSON", id="JSON nested 100,000 deep"),
    pytest.param(b"\xff\xfe{", "with no JSON", id="bytes that are no JSON"),
])
def test_should_refuse_a_hostile_prometheus_answer_naming_where_and_why(
        tmp_path: Path, hostile: str, answer: bytes, said: str) -> None:
    Answers.range_answer = answer
    code, output = report(tmp_path, hostile)
    assert code == 1 and f"error: Prometheus at {hostile} answered '" in output and said in output, output


def test_should_refuse_an_answer_over_its_bounds(tmp_path: Path, hostile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The bounds scaled down: the same checks at 3 points and 1,000 bytes.
    monkeypatch.setattr(prometheus, "MAX_POINTS", 3)
    Answers.range_answer = matrix({"metric": {}, "values": [[float(t), "1"] for t in range(4)]})
    code, output = report(tmp_path, hostile)
    assert code == 1 and "with over 3 points, the limit of one answer" in output, output
    monkeypatch.setattr(prometheus, "MAX_ANSWER_BYTES", 1000)
    Answers.range_answer = matrix({"metric": {"x": "y" * 2000}, "values": []})
    code, output = report(tmp_path, hostile)
    assert code == 1 and "with over 1,000 bytes, the limit of one answer" in output, output


@pytest.mark.parametrize(("sacct", "said"), [
    pytest.param(b"11|speech|alice|a800-train|100|200|300|gres/gpu=8x\n", "sacct printed AllocTRES gres/gpu='8x', not "
                 "a count of at most 100,000 GPUs", id="a GPU count that is no number"),
    pytest.param(b"11|speech|alice|a800-train|100|nan|300|gres/gpu=8\n", "sacct printed Start='nan', not epoch "
                 "seconds", id="a time that is NaN"),
    pytest.param(b"\n11|sp\xffeech|alice|a800-train|100|200|300\n", "sacct printed 7 fields, not 8 (JobIDRaw,Account,"
                 "User,Partition,Submit,Start,End,AllocTRES), on line 2", id="bytes that are not UTF-8, a field short"),
])
def test_should_refuse_a_hostile_sacct_naming_the_line_and_rule(tmp_path: Path, hostile: str, sacct: bytes,
                                                                 said: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sacct.out").write_bytes(sacct)
    monkeypatch.setenv("SACCT_ANSWER", str(tmp_path / "sacct.out"))
    code, output = report(tmp_path, hostile)
    assert code == 1 and said in output, output
