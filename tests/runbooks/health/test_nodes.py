"""What the health controller reads from Slurm and kubectl is untrusted: a Reason or State that is not Slurm's, JSON
with fields of the wrong type; and its files in the state dir never follow a link."""

import json
import os
from pathlib import Path

import pytest

from components.scheduling.health_decision import SUSPECT_REASON, KubeView, Phase, SlurmView
from runbooks.health.controller import AUDIT, MEMORY, Store
from runbooks.health.diagnose import Diagnoser
from runbooks.health.nodes import kube_views, slurm_views
from tests.builders import parse, prod_values

LINES = (
    "NodeName=gpu-a800-01 Arch=x86_64 CoresPerSocket=1 State=IDLE+DRAIN ThreadsPerCore=1 "
    f"Reason={SUSPECT_REASON}: GPU 3: XID 79 (GPU has fallen off the bus) [root@2026-12-03T13:00:00]\n"
    "NodeName=gpu-a800-02 State=MIXED Partitions=a800-train\n"
    "NodeName=gpu-a800-03 State=idle;rm -rf Reason=x [root@2026-12-03T13:00:00]\n"
    "garbage without a node name\n"
)


def test_should_read_each_nodes_state_and_reason_and_refuse_a_state_that_is_not_slurms() -> None:
    assert slurm_views(LINES) == {
        "gpu-a800-01": SlurmView("IDLE+DRAIN", f"{SUSPECT_REASON}: GPU 3: XID 79 (GPU has fallen off the bus)"),
        "gpu-a800-02": SlurmView("MIXED", ""),
        "gpu-a800-03": SlurmView("UNREADABLE", "x"),
    }


def test_should_read_cordons_marks_claims_and_gpu_pods_from_kubectl() -> None:
    nodes = {"items": [
        {"metadata": {"name": "a", "annotations": {"gpucluster.io/health": "suspect"}},
         "spec": {"unschedulable": True}},
        {"metadata": {"name": "b", "labels": {"gpucluster.io/flex-lent": "true", "gpucluster.io/hold": "drill x"},
                      "annotations": {"gpucluster.io/health": "anything else"}}, "spec": {"unschedulable": "yes"}},
        {"metadata": {"name": 7}}, "not an object"]}
    gpu = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    pods = {"items": [{"spec": {"nodeName": "a", "containers": [gpu]}}, {"spec": {"nodeName": "a", "containers": [{}]}},
                      {"spec": {"nodeName": "b", "containers": "nonsense"}}, {"spec": "nonsense"}]}
    assert kube_views(json.dumps(nodes), json.dumps(pods)) == {
        "a": KubeView(cordoned=True, mark=Phase.SUSPECT, gpu_pods=1),
        "b": KubeView(cordoned=False, mark="", lent=True, held_by="drill x"),
    }


@pytest.mark.parametrize("answer", ["not json", '{"kind": "List"}', '{"items": {}}'])
def test_should_fail_the_read_on_an_answer_with_no_item_list(answer: str) -> None:
    with pytest.raises(ValueError, match=r"^kubectl get nodes -o json: "):
        kube_views(answer, '{"items": []}')


@pytest.mark.parametrize("name", [MEMORY, AUDIT])
def test_should_not_follow_a_link_planted_in_the_state_dir(tmp_path: Path, name: str) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("{}")
    state = tmp_path / "state"
    state.mkdir()
    os.symlink(target, state / name)
    store = Store(state)
    with pytest.raises(OSError):
        store.memory() if name == MEMORY else store.audit("line")
    assert target.read_text() == "{}"


def test_should_judge_a_finished_diagnosis_by_dcgmis_document(tmp_path: Path) -> None:
    records = Path(__file__).parents[2] / "hosts" / "records"
    body = tmp_path / "fail.out"
    body.write_text((records / "dcgmi-diag-r3-fail-dcgm4.json").read_text().split("# ---\n", 1)[1])
    diagnoser = Diagnoser(parse(prod_values()), tmp_path, lambda node: ["sh", "-c", f"cat {body}; exit 226"])
    diagnoser.start("gpu-a800-01")
    diagnoser.running["gpu-a800-01"][0].wait(timeout=10)
    verdict = diagnoser.status("gpu-a800-01")
    assert verdict is not None and verdict.status == "failed" and "GPU 3" in verdict.detail
    # A new controller finds the verdict on disk; a diagnosis it did not start reads as none.
    again = Diagnoser(parse(prod_values()), tmp_path, lambda node: ["true"])
    assert again.status("gpu-a800-01") == verdict
    again.start("gpu-a800-02")
    assert Diagnoser(parse(prod_values()), tmp_path, lambda node: ["true"]).status("gpu-a800-02") is None
