"""The real LLM gateway (LiteLLM proxy 1.80.5, from its own venv) as the plan ships it: the config.yaml of the gateway
chart's ConfigMap, byte for byte as the plan wrote it (helm/llm-gateway.yaml), with the rendered container's args and
plain env, listening on the rendered Service's port inside a network namespace whose hosts file maps the model
servers' Service names (tests/harness/netns.py). A test double answers on the engine Services' rendered port at
the address those names resolve to, so every request leaves the proxy for the address the rendered config names.

What differs from the cluster, and why: no database runs here (../shared/notes/litellm-offline.md), so the teams' keys
come from a stand-in for its key table (tests/harness/litellm_keys.py) and the container's DATABASE_* env is left
out; the secrets the pod reads from Secrets get test values: the master key, the provider keys, and the engines' API
key derived from that master key as the stack derives it (components/inference/access.py), in the variable the
rendered engines and gateway both read it through (checked on the render).
"""

import hashlib
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from components.inference.access import engine_key
from components.inference.values import ENGINE_RELEASE, GATEWAY_RELEASE, GATEWAY_SERVICE, MASTER_KEY_ENV
from runbooks.offline.engine import ResourceGraph, run_program
from runbooks.plan import helm
from runbooks.plan.out_dir import PlanFolder
from tests.harness import netns
from tests.harness.daemons import wait_for
from tests.harness.http_double import JsonHandler, Served

REPO = Path(__file__).resolve().parents[2]
MIRROR = REPO.parent / "shared" / "charts"
LITELLM = Path(os.environ.get("GPUCLUSTER_LITELLM", REPO / ".venv" / "litellm" / "bin" / "litellm"))
"""`make test` installs the proxy into a venv of its own (its ~100 pinned dependencies stay out of the project's)."""
LAUNCHER = Path(__file__).with_name("litellm_keys.py")
KUBE_VERSION = "1.30"
STARTUP_TIMEOUT_S = 90.0
COMPLETION = "one two three four five six"
"""The double's answer: these 6 words and its version, 7 completion tokens."""
FAIL = "FAIL500"
"""A prompt holding this word makes the double answer HTTP 500."""
SERVED_KEPT = 10_000
"""Requests whose arrival a Backend remembers (a few minutes of a campaign test's load)."""


class Backend(Served):
    """An OpenAI-compatible model server: usage = words of the prompt and 7 completion tokens, like a real engine
    counting tokens; `/health` like vLLM's readiness endpoint. With an api_key, as vLLM with VLLM_API_KEY set: a /v1
    request without `Authorization: Bearer <api_key>` gets 401 {"error": "Unauthorized"}, and /health needs no key
    (vllm/entrypoints/openai/api_server.py, AuthenticationMiddleware)."""

    def __init__(self, version: str, api_key: str | None = None) -> None:
        self.version = version
        self.authorizations: Counter[str] = Counter()
        """The Authorization header of each /v1 request, as received (None-keyed as "")."""
        self.served: deque[float] = deque(maxlen=SERVED_KEPT)
        """When (time.monotonic()) each of the last SERVED_KEPT requests came: the rate it serves."""
        backend = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's names)
                self.answer(200 if self.path == "/health" else 404, {})

            def do_POST(self) -> None:  # noqa: N802 (http.server's names)
                authorization = self.headers.get("Authorization", "")
                backend.authorizations[authorization] += 1
                backend.served.append(time.monotonic())
                if api_key is not None and self.path.startswith("/v1") and authorization != f"Bearer {api_key}":
                    self.read_body()
                    self.answer(401, {"error": "Unauthorized"})
                    return
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


class EngineService(Served):
    """What the model servers' Services do for the gateway: listen on the rendered Service port at the address the
    Service names resolve to, and forward each request to one current endpoint (a Backend). Counts the Host each
    request named, the proof of which Service name the proxy dialled."""

    def __init__(self, address: tuple[str, int], endpoints: list[str]) -> None:
        self.endpoints = endpoints
        self.hosts: Counter[str] = Counter()
        service = self

        class Handler(JsonHandler):
            def do_PUT(self) -> None:  # noqa: N802 (http.server's names)
                """What a rollout does to the Service's endpoints: PUT /_endpoint with the new one's URL."""
                service.endpoints = [self.read_body().decode()]
                self.answer(200, {"endpoints": service.endpoints})

            def do_POST(self) -> None:  # noqa: N802 (http.server's names)
                service.hosts[self.headers.get("Host", "")] += 1
                target = service.endpoints[sum(service.hosts.values()) % len(service.endpoints)]
                # A Service forwards the connection whole: the caller's headers, its Authorization too, reach the pod.
                headers = {"Content-Type": "application/json",
                           **({"Authorization": self.headers["Authorization"]} if "Authorization" in self.headers
                              else {})}
                request = urllib.request.Request(f"{target}{self.path}", data=self.read_body(), method="POST",
                                                 headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        self.answer(response.status, response.read())
                except urllib.error.HTTPError as error:
                    self.answer(error.code, error.read())

        super().__init__(Handler, address)


@dataclass(frozen=True)
class PlannedGateway:
    """The gateway as the plan wrote it, read from the files, never from the values that made them."""

    plan_file: Path
    config: bytes
    """The ConfigMap's config.yaml, the bytes the pod's volume holds."""
    mount_path: str
    args: list[str]
    env: dict[str, str]
    """The container's plain env (values, not Secret references)."""
    secret_env: list[str]
    """Env the pod takes from Secrets, by name (envFrom's keys are the external APIs' api_key_env)."""
    port: int
    """The gateway Service's port, which the chart also gives the proxy as PORT."""
    engines: dict[str, int]
    """Host -> port of every served model's api_base, each checked against a Service the plan rendered."""
    engine_key_env: str
    """The gateway's variable holding the engines' API key: the field of the Secret every rendered engine reads as
    VLLM_API_KEY, which the gateway's pod takes whole through envFrom, and which each served model's api_key names."""

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.config).hexdigest()


def _only(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o.get("kind") == kind and o["metadata"]["name"] == name]
    return found


def plan_gateway(out_dir: Path, graph: ResourceGraph | None = None) -> PlannedGateway:
    """Renders the prod stack's gateway and model-server releases as `gpuctl plan --out --chart-mirror` does (the
    program under the offline engine, runbooks/plan/helm.py's render and writer) and reads back what it wrote."""
    helm_binary = helm.find_helm()
    assert helm_binary is not None, "helm is needed (make test installs it in .venv/bin)"
    graph = graph or run_program(REPO, "prod")
    releases = {r.urn: r for r in graph.of_type(helm.RELEASE_TYPE)
                if r.inputs.get("name") in (GATEWAY_RELEASE, ENGINE_RELEASE)}
    # The plan renders every release; these two are all the gateway's seams need (a Release renders alone).
    rendered = helm.render_releases(ResourceGraph(graph.project, graph.stack, releases), MIRROR, KUBE_VERSION,
                                    helm_binary)
    with PlanFolder.claim(out_dir) as folder:
        written = {path.stem: path for path in helm.write(rendered, helm.streams(rendered), folder)}
    gateway = list(yaml.safe_load_all(written[GATEWAY_RELEASE].read_bytes()))
    engines = list(yaml.safe_load_all(written[ENGINE_RELEASE].read_bytes()))
    configmap = _only(gateway, "ConfigMap", f"{GATEWAY_SERVICE}-config")
    deployment = _only(gateway, "Deployment", GATEWAY_SERVICE)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "litellm-config"]
    config: str = configmap["data"]["config.yaml"]
    service_ports = {f"{s['metadata']['name']}.{s['metadata']['namespace']}.svc":
                     {p["port"] for p in s["spec"]["ports"]} for s in engines if s.get("kind") == "Service"}
    served = {}
    for entry in yaml.safe_load(config)["model_list"]:
        if entry["litellm_params"]["model"].startswith("hosted_vllm/"):
            url = urlsplit(entry["litellm_params"]["api_base"])
            assert url.port in service_ports.get(str(url.hostname), set()), (url.geturl(), service_ports)
            served[str(url.hostname)] = int(url.port or 80)
    # The engines' key: one Secret field every engine reads, a Secret the gateway's pod imports whole (envFrom), and
    # the variable each served model's api_key names.
    (engine_key_ref,) = {(r["name"], r["key"]) for d in engines if d.get("kind") == "Deployment"
                         for c in d["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])
                         if e["name"] == "VLLM_API_KEY" for r in [e["valueFrom"]["secretKeyRef"]]}
    assert engine_key_ref[0] in [f["secretRef"]["name"] for f in container.get("envFrom", []) if "secretRef" in f]
    assert {e["litellm_params"]["api_key"] for e in yaml.safe_load(config)["model_list"]
            if e["litellm_params"]["model"].startswith("hosted_vllm/")} == {f"os.environ/{engine_key_ref[1]}"}
    (port,) = {int(p["port"]) for p in _only(gateway, "Service", GATEWAY_SERVICE)["spec"]["ports"]}
    external = [e["litellm_params"]["api_key"].removeprefix("os.environ/") for e in yaml.safe_load(config)["model_list"]
                if str(e["litellm_params"].get("api_key", "")).startswith("os.environ/")]
    return PlannedGateway(
        written[GATEWAY_RELEASE], config.encode(), mount["mountPath"], list(container["args"]),
        {e["name"]: str(e["value"]) for e in container["env"] if "value" in e},
        [e["name"] for e in container["env"] if "valueFrom" in e] + external, port, served, engine_key_ref[1])


@dataclass(frozen=True)
class GatewayWorld:
    url: str
    """The proxy, from this (the root) namespace: the node side's address and the rendered Service port."""
    engine_address: tuple[str, int]
    """Where the engine Services' names resolve inside, and their rendered port: bind an EngineService here."""
    namespace: str
    config_digest: str
    """sha256 of the config file the proxy read."""


@contextmanager
def running_gateway(planned: PlannedGateway, directory: Path, keys: dict[str, str],
                    master_key: str = "sk-test-master") -> Iterator[GatewayWorld]:
    """The proxy inside a network namespace; keys: API key -> team (the stand-in key table)."""
    assert LITELLM.exists(), f"{LITELLM} is missing: `make test` installs the LiteLLM proxy"
    (engine_port,) = set(planned.engines.values())
    # The ConfigMap volume: its key written, unchanged, where the container's mount puts it.
    mounted = directory / planned.mount_path.strip("/")
    mounted.mkdir(parents=True, exist_ok=True)
    (mounted / "config.yaml").write_bytes(planned.config)
    args = [str(mounted / a.removeprefix(planned.mount_path.rstrip("/") + "/")) if a.startswith(planned.mount_path)
            else a for a in planned.args]
    # No database here: its env stays out, or the proxy would try to reach it (module docstring).
    env = {**os.environ, **{k: v for k, v in planned.env.items() if not k.startswith("DATABASE_")},
           **{name: "unused-by-the-double" for name in planned.secret_env if not name.startswith("DATABASE_")},
           MASTER_KEY_ENV: master_key, planned.engine_key_env: engine_key(master_key),
           "GATEWAY_TEST_KEYS": json.dumps(keys)}
    with netns.namespace(host_names=sorted(planned.engines)) as ns, (directory / "litellm.log").open("w") as log:
        proxy = subprocess.Popen(["ip", "netns", "exec", ns.name, str(LITELLM.with_name("python")), str(LAUNCHER),
                                  *args], cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT)
        ns.daemons.append(proxy)
        url = f"http://{ns.node_address}:{planned.port}"

        def alive() -> bool:
            assert proxy.poll() is None, (directory / "litellm.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{url}/health/liveliness", timeout=2) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        wait_for("the LiteLLM proxy to start", alive, STARTUP_TIMEOUT_S, interval_s=0.5)
        yield GatewayWorld(url, (ns.host_address, engine_port), ns.name,
                           hashlib.sha256((mounted / "config.yaml").read_bytes()).hexdigest())


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
