"""team-gpus-capped: every team namespace has a GPU quota and a default Kueue queue limited on every flavor."""

from typing import Any

import pytest
import teams
from pulumi_policy import PolicyResource
from pulumi_policy.proxy import UNKNOWN_NUMBER_VALUE

from tests.policy.builders import judge_stack, resource


def gpu_flavor(name: str, **limits: Any) -> dict[str, Any]:
    return {"name": name, "resources": [{"name": "cpu", "nominalQuota": 0},
                                        {"name": "nvidia.com/gpu", "nominalQuota": 0, **limits}]}


def team(name: str = "speech", *, quota: bool = True, local_queue: str | None = "default",
         target: str = "team-speech", cluster_queue: dict[str, Any] | None = None) -> list[PolicyResource]:
    spec = cluster_queue if cluster_queue is not None else {
        "cohort": "gpu-cluster", "namespaceSelector": {"matchLabels": {teams.TEAM_LABEL: name}},
        "resourceGroups": [{"coveredResources": ["cpu", "nvidia.com/gpu"],
                            "flavors": [gpu_flavor("a800-kubernetes", borrowingLimit=8),
                                        gpu_flavor("rtx4090-kubernetes", borrowingLimit=4)]}],
    }
    made = [resource(teams.NAMESPACE_TYPE, f"{name}-namespace",
                     {"metadata": {"name": name, "labels": {teams.TEAM_LABEL: name}}}),
            resource(teams.CLUSTER_QUEUE_TYPE, f"{name}-cluster-queue", {"metadata": {"name": f"team-{name}"},
                                                                         "spec": spec})]
    if quota:
        made.append(resource(teams.QUOTA_TYPE, f"{name}-gpu-quota", {
            "metadata": {"name": "gpu-quota", "namespace": name}, "spec": {"hard": {"requests.nvidia.com/gpu": "12"}}}))
    if local_queue:
        made.append(resource(teams.LOCAL_QUEUE_TYPE, f"{name}-queue", {
            "metadata": {"name": local_queue, "namespace": name}, "spec": {"clusterQueue": target}}))
    return made


SELECTS_SPEECH = {"matchLabels": {"gpucluster.io/team": "speech"}}
UNCAPPED_RTX = {"cohort": "gpu-cluster", "namespaceSelector": SELECTS_SPEECH, "resourceGroups": [{
    "coveredResources": ["cpu", "nvidia.com/gpu"],
    "flavors": [gpu_flavor("a800-kubernetes", borrowingLimit=8), gpu_flavor("rtx4090-kubernetes")]}]}


@pytest.mark.parametrize(("resources", "expected"), [
    pytest.param(team(), [], id="should admit a team capped on every flavor"),
    pytest.param(team(cluster_queue={"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "speech"}},
                                     "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
        {"name": "a800-kubernetes", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]}), [],
        id="should take the nominal quota as the limit of a queue outside any cohort"),
    pytest.param(team(quota=False), ["Namespace speech-namespace: no ResourceQuota sets hard requests.nvidia.com/gpu; "
                                     "GPU pods that no queue admits would be unlimited"],
                 id="should deny a team namespace without a GPU quota"),
    pytest.param(team(local_queue="gpu"), ["Namespace speech-namespace: no Kueue LocalQueue named default; a team job "
                                           "that names no queue would run outside the team's GPU limits"],
                 id="should deny a team without a default queue"),
    pytest.param(team(target="gpu-kubernetes"), ["Namespace speech-namespace: LocalQueue default submits to "
                                                 "ClusterQueue gpu-kubernetes, which the stack does not define"],
                 id="should deny a default queue submitting to an undefined ClusterQueue"),
    pytest.param(team(cluster_queue=UNCAPPED_RTX),
                 ["ClusterQueue team-speech (team speech) puts no limit on nvidia.com/gpu for flavor "
                  "rtx4090-kubernetes; set a borrowingLimit (nominalQuota outside a cohort)"],
                 id="should deny a flavor a team may borrow without limit"),
    pytest.param(team(cluster_queue={**UNCAPPED_RTX, "namespaceSelector": {}}),
                 ["ClusterQueue team-speech (LocalQueue default of team speech) does not admit only namespace speech, "
                  "so the team would share its limits; select it by matchLabels gpucluster.io/team: speech"],
                 id="should deny a team queue other namespaces share"),
    pytest.param([*team(), resource(teams.LOCAL_QUEUE_TYPE, "speech-batch", {
        "metadata": {"name": "batch", "namespace": "speech"}, "spec": {"clusterQueue": "gpu-kubernetes"}})],
                 ["Namespace speech-namespace: LocalQueue batch submits to ClusterQueue gpu-kubernetes, which the "
                  "stack does not define"], id="should judge every LocalQueue of a team, not only the default"),
    pytest.param([*team(), *team("vision", quota=False)],
                 ["Namespace vision-namespace: no ResourceQuota sets hard requests.nvidia.com/gpu; GPU pods that no "
                  "queue admits would be unlimited"], id="should judge each team on its own"),
])
def test_team_gpus_capped(resources: list[PolicyResource], expected: list[str]) -> None:
    assert judge_stack(teams.TEAM_GPUS_CAPPED, *resources).messages == expected


def test_should_fail_closed_on_a_limit_unknown_at_preview() -> None:
    unknown = {"cohort": "gpu-cluster", "namespaceSelector": SELECTS_SPEECH, "resourceGroups": [{
        "coveredResources": ["nvidia.com/gpu"],
        "flavors": [{"name": "a800-kubernetes", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 0,
                                                               "borrowingLimit": UNKNOWN_NUMBER_VALUE}]}]}]}
    assert judge_stack(teams.TEAM_GPUS_CAPPED, *team(cluster_queue=unknown)).messages == [
        "ClusterQueue speech-cluster-queue: spec.resourceGroups.0.flavors.0.resources.0.borrowingLimit is unknown at "
        "preview; this policy fails closed"]


def test_should_not_judge_a_stack_without_team_namespaces() -> None:
    plain = resource(teams.NAMESPACE_TYPE, "kueue-system", {"metadata": {"name": "kueue-system"}})
    assert judge_stack(teams.TEAM_GPUS_CAPPED, plain).not_applicable == "no team namespace in the stack"
