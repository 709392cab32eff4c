"""The inference path's metering, end to end on real consumers: the real LiteLLM proxy running the config file the plan
wrote, unmodified (its digest compared), in a network namespace where the model servers' Service names resolve to a
test double listening on their rendered port; a real Prometheus scraping the proxy as the stack's ServiceMonitor says
and evaluating the stack's rules, the cost dashboard's panel queries and the rollout's error-rate gate. The engines'
API key: the gateway sends it, and the model server's stand-in refuses a call without it as vLLM does. Then a model
server's hot swap under load through it.

A known mix of requests from two teams' keys to both served models (tests/harness/gateway.py has the double behind
their Services); what the gateway counts must equal what was sent, to the token. The external APIs are not called:
their endpoints are the providers' own, outside any network a test reaches.
"""

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from components.inference.access import engine_key
from components.inference.values import gateway_service_monitor
from components.monitoring.alerts import Record
from components.monitoring.dashboards import LLM_COST_UID, as_sent, render_dashboards, targets
from components.site.site import Gates, Site
from runbooks.rollout.gates import PrometheusGates, Verdict
from tests.builders import parse, prod_values, with_changes
from tests.harness import netns
from tests.harness.daemons import PrometheusServer, rules_every_second, wait_for
from tests.harness.figures import FIGURES
from tests.harness.gateway import (
    FAIL,
    LITELLM,
    Backend,
    EngineService,
    PlannedGateway,
    chat,
    plan_gateway,
    running_gateway,
)

pytestmark = pytest.mark.skipif(bool(netns.missing() or not LITELLM.exists()),
                                reason=netns.missing() or "needs the LiteLLM venv (make test)")

KEYS = {"sk-speech-test": "speech", "sk-vision-test": "vision"}
MASTER = "sk-test-master"
SERVED, OTHER = "qwen2-5-72b", "llama-3-1-8b"
MIX = [
    # (team, model, prompt words, requests)
    ("speech", SERVED, 5, 3),
    ("speech", OTHER, 4, 2),
    ("vision", SERVED, 3, 4),
    ("vision", OTHER, 10, 1),
]
COMPLETION_TOKENS = 7


@pytest.fixture(scope="module")
def site() -> Site:
    """Prod, its rules evaluated every second (rules_every_second)."""
    return parse(with_changes(prod_values(), monitoring__rule_evaluation_interval_s=1))


@dataclass
class World:
    url: str
    prometheus: PrometheusServer
    service: EngineService
    planned: PlannedGateway
    backend: Backend
    engine_key: str
    """The engines' API key, as the stack derives it from the gateway's master key."""


@pytest.fixture(scope="module")
def world(site: Site, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    directory = tmp_path_factory.mktemp("gateway")
    planned = plan_gateway(directory / "plan")
    key = engine_key(MASTER)
    backend = Backend("v1", api_key=key)
    with running_gateway(planned, directory, KEYS, MASTER) as gateway:
        service = EngineService(gateway.engine_address, [backend.url])
        assert gateway.config_digest == planned.digest
        endpoint = gateway_service_monitor()["spec"]["endpoints"][0]
        scrape = {"job_name": "llm-gateway", "metrics_path": endpoint["path"],
                  "static_configs": [{"targets": [urllib.parse.urlsplit(gateway.url).netloc]}]}
        prometheus = PrometheusServer(directory, [scrape], rules_every_second(site))
        try:
            prometheus.wait_ready()
            yield World(gateway.url, prometheus, service, planned, backend, key)
        finally:
            prometheus.stop()
            service.stop()
            backend.stop()


def query(prometheus: PrometheusServer, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
    url = f"{prometheus.url}/api/v1/query?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def by(result: list[dict[str, Any]], *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(s["metric"].get(label, "") for label in labels): float(s["value"][1]) for s in result}


def send_mix(url: str) -> None:
    for team, model, words, count in MIX:
        key = next(k for k, t in KEYS.items() if t == team)
        for _ in range(count):
            status, answer = chat(url, key, model, " ".join(["word"] * words))
            assert status == 200, (team, model, status)
            assert answer["usage"] == {"prompt_tokens": words, "completion_tokens": COMPLETION_TOKENS,
                                       "total_tokens": words + COMPLETION_TOKENS}, answer["usage"]
    assert chat(url, "sk-stranger", SERVED, "hello")[0] == 401


def expected_tokens() -> dict[tuple[str, ...], float]:
    tokens: Counter[tuple[str, ...]] = Counter()
    for team, model, words, count in MIX:
        tokens[(team, model, "prompt")] += words * count
        tokens[(team, model, "completion")] += COMPLETION_TOKENS * count
    return dict(tokens)


@pytest.mark.expected_s(40)
def test_should_meter_every_teams_tokens_and_cost_per_model_and_token_type(site: Site, world: World) -> None:
    url, prometheus = world.url, world.prometheus
    send_mix(url)
    # Every request left the proxy for a model server's Service as the plan rendered it: its name, its port.
    assert set(world.service.hosts) == {host if port == 80 else f"{host}:{port}"
                                        for host, port in world.planned.engines.items()}, world.service.hosts
    expected = expected_tokens()
    counters = {"prompt": "litellm_input_tokens_metric_total", "completion": "litellm_output_tokens_metric_total"}

    def scraped() -> dict[tuple[str, ...], float]:
        found: dict[tuple[str, ...], float] = {}
        for kind, metric in counters.items():
            for (team, model), value in by(query(prometheus, f"sum by (team_alias, requested_model) ({metric})"),
                                           "team_alias", "requested_model").items():
                found[(team, model, kind)] = value
        return found

    wait_for("the gateway's token counters in Prometheus", lambda: scraped() == expected, 30, interval_s=0.5)
    # Spend is LiteLLM's own: tokens times the prices the stack configured, which are the cost rules' prices.
    prices = {p.model: p for p in site.inference.prices()}
    spend = by(query(prometheus, "sum by (team_alias, model) (litellm_spend_metric_total)"), "team_alias", "model")
    for team in KEYS.values():
        for model in (SERVED, OTHER):
            usd = (expected[(team, model, "prompt")] * prices[model].prompt_usd_per_mtok
                   + expected[(team, model, "completion")] * prices[model].completion_usd_per_mtok) / 1e6
            assert spend[(team, model)] == pytest.approx(usd, rel=1e-9)

    # The recording rules: one token series per (team, model, type) sent, none for the stranger's request, each
    # priced at the table's price, and a team's cost the sum of its parts.
    def recorded() -> dict[tuple[str, ...], float]:
        return by(query(prometheus, Record.TOKENS), "team", "model", "token_type")

    wait_for("the token rates recorded", lambda: set(recorded()) == set(expected), 30, interval_s=0.5)
    tokens, cost = recorded(), by(query(prometheus, Record.COST), "team", "model", "token_type")
    assert set(cost) == set(expected)
    for (team, model, kind), rate in tokens.items():
        price = getattr(prices[model], f"{kind}_usd_per_mtok")
        assert cost[(team, model, kind)] == pytest.approx(rate * price * 3600 / 1e6, rel=1e-9)
    team_cost = by(query(prometheus, Record.TEAM_COST), "team")
    for team in KEYS.values():
        assert team_cost[(team,)] == pytest.approx(sum(v for k, v in cost.items() if k[0] == team), rel=1e-9)

    # Every panel of the cost dashboard answers, as Grafana sends it, for both teams; asked at the next whole minute,
    # where the range table's 1-minute subquery has its first step after seconds-old data.
    board = render_dashboards(site)[LLM_COST_UID]
    next_minute = (time.time() // 60 + 1) * 60
    for panel, target in targets(board):
        result = query(prometheus, as_sent(target["expr"], board), next_minute)
        teams = {s["metric"].get("team") for s in result} - {None}
        assert result and teams in ({"speech", "vision"}, set()), (panel["title"], result)
    rows = [f"{team:>7} {model:>12} {expected[(team, model, 'prompt')]:>4.0f} prompt "
            f"{expected[(team, model, 'completion')]:>4.0f} completion tokens, spend {usd:.9f} USD"
            for (team, model), usd in sorted(spend.items())]
    FIGURES.append("LLM gateway metering (real LiteLLM 1.80.5 + Prometheus), counted = sent, spend = tokens x the "
                   "spec's prices:\n  " + "\n  ".join(rows))
    FIGURES.append(f"LLM gateway ran {world.planned.plan_file.name}'s config.yaml unmodified (sha256 "
                   f"{world.planned.digest[:16]}... = the file the proxy read); requests reached "
                   + ", ".join(f"{host}:{port}" for host, port in sorted(world.planned.engines.items())))


def test_should_pass_the_error_gate_without_failures_and_hold_it_with_them(world: World) -> None:
    url, prometheus = world.url, world.prometheus
    gates = PrometheusGates(prometheus.url, Gates(max_inference_error_pct=1.0), window_minutes=5)

    def error_gate() -> Any:
        return next(r for r in gates.check().results if r.gate == "inference_error_rate")

    send_mix(url)  # a stranger's refused key is in it: not the platform's failure
    wait_for("the error gate to pass", lambda: error_gate().verdict == Verdict.PASS, 30, interval_s=0.5)
    passed = error_gate()
    key = next(iter(KEYS))
    # Failing for a while, as a broken model server does: LiteLLM creates the failure series at its first failure, and
    # rate() counts from the series' first scrape on.
    for _ in range(4):
        assert chat(url, key, SERVED, f"please {FAIL}")[0] == 500
        time.sleep(1.5)
    wait_for("the error gate to hold", lambda: error_gate().verdict == Verdict.FAIL, 30, interval_s=0.5)
    FIGURES.append(f"inference_error_rate gate: {passed.value:.2f} % with no failures (pass), "
                   f"{error_gate().value:.2f} % after 4 injected upstream 500s over 6 s (fail, limit 1 %)")


def test_should_swap_a_model_version_under_load_without_a_failed_request(world: World) -> None:
    old = world.service.endpoints[0]
    statuses: Counter[int] = Counter()
    versions: list[str] = []
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set() and len(versions) < 2000:
            status, answer = chat(world.url, next(iter(KEYS)), SERVED, "swap me")
            statuses[status] += 1
            if status == 200:
                versions.append(answer["choices"][0]["message"]["content"].split()[-1])

    workers = [threading.Thread(target=load) for _ in range(4)]
    for worker in workers:
        worker.start()
    time.sleep(3)
    # The rollout vllm-stack renders for a new revision: maxSurge 100 %, maxUnavailable 0, readiness first.
    new = Backend("v2", api_key=world.engine_key)
    try:
        with urllib.request.urlopen(f"{new.url}/health", timeout=5) as ready:
            assert ready.status == 200
        world.service.endpoints = [old, new.url]
        time.sleep(2)
        world.service.endpoints = [new.url]
        time.sleep(4)
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=60)
        world.service.endpoints = [old]
        new.stop()
    assert statuses[200] > 0 and set(statuses) == {200}, statuses
    assert versions[0] == "v1" and versions[-1] == "v2" and "v2" in versions
    FIGURES.append(f"model hot swap v1 -> v2 through the real gateway: {statuses[200]} requests, "
                   f"{sum(n for s, n in statuses.items() if s != 200)} failed, "
                   f"{versions.count('v1')} answered by v1 and {versions.count('v2')} by v2")


def test_should_send_the_engines_key_and_the_engines_refuse_a_call_without_it(world: World) -> None:
    before = sum(world.backend.authorizations.values())
    status, _ = chat(world.url, next(iter(KEYS)), SERVED, "with the engines' key")
    assert status == 200
    # Every request the gateway sent any engine carried the key it read from the engines' Secret, and nothing else.
    assert set(world.backend.authorizations) == {f"Bearer {world.engine_key}"}, set(world.backend.authorizations)
    assert sum(world.backend.authorizations.values()) > before
    # A pod that reaches an engine past the gateway (and past its NetworkPolicy), with no key or a team's gateway key:
    # refused, as vLLM refuses a /v1 request without its --api-key.
    for authorization in ({}, {"Authorization": f"Bearer {next(iter(KEYS))}"}):
        request = urllib.request.Request(
            f"{world.backend.url}/v1/chat/completions", method="POST",
            data=json.dumps({"model": SERVED, "messages": [{"role": "user", "content": "no key"}]}).encode(),
            headers={"Content-Type": "application/json", **authorization})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401
    FIGURES.append(f"engines' API key: {world.backend.authorizations[f'Bearer {world.engine_key}']} requests from the "
                   "real gateway carried it; a call without it, or with a team's gateway key, got 401")
