"""The inference section: served models and external APIs behind the gateway, their prices and where they fit."""

from typing import Any

import pytest

from tests.builders import parse, problems, prod_values, with_changes


def test_should_price_external_apis_at_their_price_and_served_models_at_their_gpu_hours() -> None:
    inference = parse(prod_values()).inference
    prices = {p.model: p for p in inference.prices()}
    assert (prices["gpt-4o"].prompt_usd_per_mtok, prices["gpt-4o"].completion_usd_per_mtok) == (2.5, 10.0)
    llama = next(m for m in inference.models if m.name == "llama-3-1-8b")
    # 1 RTX 4090 at 0.5 USD/h generating 1,200 tokens/s: 0.5 / (1200 * 3600) * 1e6 USD per million.
    assert prices[llama.name].completion_usd_per_mtok == pytest.approx(0.5 / (1200 * 3600) * 1e6)
    assert inference.gateway.budget_of("nlp-foundation") == 5000 and inference.gateway.budget_of("speech") == 1000


@pytest.mark.parametrize(("change", "expected"), [
    pytest.param({"inference__external__0__name": "qwen2-5-72b"},
                 'inference.external[0].name: "qwen2-5-72b" is already used by inference.models[0]',
                 id="should refuse a gateway name used twice"),
    pytest.param({"inference__models__1__teams": ["nobody"]},
                 'inference.models[1].teams: no team named "nobody"', id="should refuse a model for a team not there"),
    pytest.param({"inference__gateway__team_budgets": {"ghost": 5}},
                 'inference.gateway.team_budgets: no team named "ghost"', id="should refuse a budget for no team"),
    pytest.param({"inference__models__0__gpus_per_replica": 16},
                 "inference.models[0].gpus_per_replica: 16 GPUs per replica do not fit one node "
                 "(8 A800-SXM4-80GB per node)", id="should refuse a replica wider than a node"),
    pytest.param({"inference__models__1__replicas__max": 33},
                 "inference.models[1].replicas.max: 33 replicas of 1 GPUs need more than the 32 that fit on the "
                 "RTX-4090 nodes of the kubernetes and flex pools",
                 id="should refuse more replicas than the pools hold"),
    pytest.param({"inference__models__0__gpu_model": "H100"},
                 'inference.models[0].gpu_model: no GPU model in the kubernetes or flex pool named "H100"',
                 id="should refuse a GPU the inference pools lack"),
    pytest.param({"inference__gpu_hour_usd": {"A800-SXM4-80GB": 2.0}},
                 "inference.gpu_hour_usd: no hourly cost for RTX-4090, which inference.models[1] runs on",
                 id="should refuse a served model it cannot price"),
    pytest.param({"inference__models__0__replicas": {"min": 3, "max": 2}},
                 "inference.models[0].replicas: Value error, max (2) must be at least min (3)",
                 id="should refuse replica bounds upside down"),
    pytest.param({"inference__external__0__prompt_usd_per_mtok": 5000},
                 "inference.external[0].prompt_usd_per_mtok: Input should be less than or equal to 1000",
                 id="should refuse a price past any API's"),
    pytest.param({"inference__gateway__admin_url": "http://x/;rm -rf /"},
                 "inference.gateway.admin_url: String should match pattern", id="should refuse a URL with a space"),
])
def test_should_refuse_an_inference_section_that_cannot_serve(change: dict[str, Any], expected: str) -> None:
    found = problems(with_changes(prod_values(), **change))
    assert any(p.startswith(expected) for p in found), found
