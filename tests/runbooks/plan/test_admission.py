"""The pools-exclusive admission policy as the API server would apply it: its CEL evaluated on sample pods."""

import subprocess
import sys
from typing import Any

import pytest

from components.scheduling.pools import pools_exclusive_binding, pools_exclusive_policy
from components.site.wellknown import POOL_TAINT, TEAM_LABEL
from runbooks.plan.admission import denials, pools_exclusive
from runbooks.plan.producers import Deployed
from tests.builders import REPO, parse, prod_values

SLURM = {"key": POOL_TAINT, "operator": "Equal", "value": "slurm", "effect": "NoSchedule"}
FLEX = {"key": POOL_TAINT, "operator": "Equal", "value": "flex", "effect": "NoSchedule"}
GPUS = {"limits": {"nvidia.com/gpu": "4"}}


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def deployed(*objects: dict[str, Any]) -> Deployed:
    site = parse(prod_values())
    return Deployed([pools_exclusive_policy(), pools_exclusive_binding(site), namespace("nlp-foundation", **{
        TEAM_LABEL: "nlp-foundation"}), namespace("inference"), namespace("gpu-operator"), *objects], [], {})


def pod(ns: str, resources: dict[str, Any] | None = None, init: bool = False, **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "registry.example/job:1", **({"resources": resources} if resources else {})}
    containers = {"initContainers": [container], "containers": [{"name": "main", "image": "x"}]} if init else {
        "containers": [container]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns},
            "spec": {**containers, **spec}}


@pytest.mark.parametrize(("sample", "refused"), [
    pytest.param(pod("nlp-foundation", GPUS), [], id="should admit a team's GPU pod that tolerates no pool"),
    pytest.param(pod("nlp-foundation", tolerations=[SLURM]), [],
                 id="should admit a pod without GPUs on a Slurm node (node agents)"),
    pytest.param(pod("nlp-foundation", GPUS, tolerations=[SLURM]), ["slurm pool's taint"],
                 id="should deny a team's GPU pod that tolerates the slurm pool"),
    pytest.param(pod("nlp-foundation", {"requests": {"nvidia.com/gpu": "1"}}, tolerations=[
        {"key": POOL_TAINT, "operator": "Exists"}]), ["slurm pool's taint", "flex pool's taint"],
                 id="should deny a GPU pod that tolerates the pool taint whatever its value"),
    pytest.param(pod("nlp-foundation", GPUS, tolerations=[{"operator": "Exists"}]),
                 ["slurm pool's taint", "flex pool's taint"], id="should deny a GPU pod that tolerates every taint"),
    pytest.param(pod("nlp-foundation", GPUS, tolerations=[{**SLURM, "effect": "NoExecute"}]), [],
                 id="should admit a toleration of another effect, which the NoSchedule taint still repels"),
    pytest.param(pod("nlp-foundation", GPUS, init=True, tolerations=[SLURM]), ["slurm pool's taint"],
                 id="should deny GPUs requested by an init container"),
    pytest.param(pod("nlp-foundation", GPUS, tolerations=[FLEX]), ["flex pool's taint"],
                 id="should deny a team's GPU pod that tolerates the flex pool"),
    pytest.param(pod("inference", GPUS, tolerations=[FLEX]), [], id="should admit a model server on lent flex nodes"),
    pytest.param(pod("inference", GPUS, tolerations=[SLURM]), ["slurm pool's taint"],
                 id="should deny even inference the slurm pool"),
    pytest.param(pod("nlp-foundation", GPUS, nodeName="gpu-a800-01"), ["may not name its node"],
                 id="should deny a GPU pod that bypasses the scheduler"),
    pytest.param(pod("gpu-operator", GPUS, nodeName="gpu-a800-01", tolerations=[SLURM, FLEX]), [],
                 id="should leave the GPU Operator's validation pods alone"),
])
def test_should_judge_sample_pods_as_the_api_server_would(sample: dict[str, Any], refused: list[str]) -> None:
    reasons = denials(deployed(), sample)
    assert len(reasons) == len(refused) and all(why in reason for why, reason in zip(refused, reasons, strict=True)), \
        reasons


def test_should_hold_the_prod_policy_and_name_each_way_around_a_weakened_one() -> None:
    assert pools_exclusive(deployed()) == []
    weak = pools_exclusive_policy()
    del weak["spec"]["validations"][2]
    found = pools_exclusive(Deployed([weak, *deployed().objects[1:]], [], {}))
    assert found == ["nothing refuses a GPU pod in team namespace nlp-foundation naming its node: it would get GPUs "
                     "Slurm also hands out"]


def test_should_evaluate_cel_without_importing_the_packages_repl() -> None:
    # In a fresh interpreter: gpuctl plan's imports carry the CEL engine, not the REPL of its package (0.2 s of CPU),
    # and a later `import cel` gets the same compiled module, which may be initialized once per process.
    probe = ("import sys; import runbooks.plan.admission as a; repl = 'prompt_toolkit' in sys.modules; import cel; "
             "print(repl, cel.evaluate is a.cel.evaluate, a.cel.evaluate('1 + 2 == 3', {}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]
