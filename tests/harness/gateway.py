"""The real LLM gateway (LiteLLM proxy 1.80.5, from its own venv) on 127.0.0.1, in front of an OpenAI-compatible test
double, with the configuration the stack renders: the gateway chart's ConfigMap, rendered by the real Helm.

Two things differ from production, both because no GPU and no database run here (../shared/notes/litellm-offline.md):
every model's api_base points at the double, and a custom_auth hook maps the test's keys to their teams in place of
the keys `gpuctl gateway ensure-team` creates in the gateway's database. Team attribution stays LiteLLM's own: the
hook returns the team id and alias a database key would carry, and LiteLLM labels every metric with them.
"""

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from components.charts import LITELLM as GATEWAY_CHART
from components.inference.values import GATEWAY_RELEASE, NAMESPACE, gateway_values
from components.spec.site import Site
from runbooks.plan.helm import chart_archive, find_helm
from tests.harness.daemons import free_ports, stop_all, wait_for
from tests.harness.http_double import JsonHandler, Served

REPO = Path(__file__).resolve().parents[2]
MIRROR = REPO.parent / "shared" / "charts"
LITELLM = Path(os.environ.get("GPUCLUSTER_LITELLM", REPO / ".venv" / "litellm" / "bin" / "litellm"))
"""`make test` installs the proxy into a venv of its own (its ~100 pinned dependencies stay out of the project's)."""
STARTUP_TIMEOUT_S = 90.0
COMPLETION = "one two three four five six"
"""The double's answer: these 6 words and its version, 7 completion tokens."""
FAIL = "FAIL500"
"""A prompt holding this word makes the double answer HTTP 500."""

AUTH_HOOK = '''
from fastapi import Request
from litellm.proxy._types import ProxyException, UserAPIKeyAuth

KEYS = {keys}


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    if api_key in KEYS:
        team = KEYS[api_key]
        return UserAPIKeyAuth(api_key=api_key, team_id=team + "-id", team_alias=team, key_alias=team + "-default")
    raise ProxyException(message="unknown key", type="auth_error", param="api_key", code=401)
'''


class Backend(Served):
    """An OpenAI-compatible model server: usage = words of the prompt and 7 completion tokens, like a real engine
    counting tokens; `/health` like vLLM's readiness endpoint."""

    def __init__(self, version: str) -> None:
        self.version = version
        backend = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's names)
                self.answer(200 if self.path == "/health" else 404, {})

            def do_POST(self) -> None:  # noqa: N802 (http.server's names)
                messages = json.loads(self.read_body()).get("messages", [])
                words = sum(len(str(m.get("content", "")).split()) for m in messages)
                if any(FAIL in str(m.get("content", "")) for m in messages):
                    self.answer(500, {"error": {"message": "injected failure", "type": "server_error"}})
                    return
                self.answer(200, {
                    "id": f"cmpl-{backend.version}", "object": "chat.completion", "created": 0, "model": "served",
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {
                        "role": "assistant", "content": f"{COMPLETION} {backend.version}"}}],
                    "usage": {"prompt_tokens": words, "completion_tokens": 7, "total_tokens": words + 7}})

        super().__init__(Handler)


def rendered_config(site: Site, directory: Path) -> dict[str, Any]:
    """The proxy's config.yaml as the real Helm renders it into the gateway's ConfigMap from the stack's values."""
    helm = find_helm()
    assert helm is not None, "helm is needed (make test installs it in .venv/bin)"
    values = directory / "gateway-values.json"
    values.write_text(json.dumps(gateway_values(site)))
    chart = chart_archive(MIRROR, GATEWAY_CHART.name, GATEWAY_CHART.version)
    done = subprocess.run([helm, "template", GATEWAY_RELEASE, str(chart), "--namespace", NAMESPACE, "--values",
                           str(values)], capture_output=True, text=True, timeout=60, check=True)
    (configmap,) = [o for o in yaml.safe_load_all(done.stdout) if o and o["kind"] == "ConfigMap"]
    config: dict[str, Any] = yaml.safe_load(configmap["data"]["config.yaml"])
    return config


def behind(rendered: dict[str, Any], api_base: str, auth_hook: str) -> dict[str, Any]:
    """The stack's proxy config with every model behind `api_base` and the custom_auth hook for the database."""
    config: dict[str, Any] = json.loads(json.dumps(rendered))
    for entry in config["model_list"]:
        entry["litellm_params"]["api_base"] = f"{api_base}/v1"
    config["general_settings"] = {"custom_auth": auth_hook}
    return config


@contextmanager
def running_gateway(directory: Path, rendered: dict[str, Any], api_base: str,
                    keys: dict[str, str]) -> Iterator[str]:
    """The proxy on a free port; yields its URL. keys: API key -> team name."""
    assert LITELLM.exists(), f"{LITELLM} is missing: `make test` installs the LiteLLM proxy"
    (directory / "auth_hook.py").write_text(AUTH_HOOK.format(keys=json.dumps(keys)))
    config = behind(rendered, api_base, "auth_hook.user_api_key_auth")
    (directory / "config.yaml").write_text(yaml.safe_dump(config))
    (port,) = free_ports(1)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENAI_API_KEY": "unused-by-the-double"}
    with (directory / "litellm.log").open("w") as log:
        proxy = subprocess.Popen([str(LITELLM), "--config", str(directory / "config.yaml"), "--host", "127.0.0.1",
                                  "--port", str(port)], cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def alive() -> bool:
        assert proxy.poll() is None, (directory / "litellm.log").read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"{url}/health/liveliness", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    try:
        wait_for("the LiteLLM proxy to start", alive, STARTUP_TIMEOUT_S, interval_s=0.5)
        yield url
    finally:
        stop_all([proxy])


def chat(url: str, key: str, model: str, prompt: str, timeout_s: float = 30.0) -> tuple[int, dict[str, Any]]:
    """One chat completion through the gateway: (HTTP status, JSON answer)."""
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", method="POST",
        data=json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}]}).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, {}
