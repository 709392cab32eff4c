"""team-storage-isolated: the stack's admission policies, evaluated by a CEL engine as the API server would, keep
each team's namespace to its own hot StorageClass and away from NFS mounted by hand."""

import copy
from typing import Any

import isolation
import pytest
from pulumi_policy import PolicyResource

from components.storage.tiers import team_isolation_binding, team_isolation_policy
from tests.builders import parse, prod_values
from tests.policy.builders import judge_stack, resource

SITE = parse(prod_values())
TEAMS = ("speech", "vision")


def team_resources(team: str) -> list[PolicyResource]:
    labels = {isolation.TEAM_LABEL: team}
    return [resource(isolation.NAMESPACE_TYPE, f"{team}-namespace", {"metadata": {"name": team, "labels": labels}}),
            resource(isolation.STORAGE_CLASS_TYPE, f"{team}-nfs-hot", {
                "metadata": {"name": f"nfs-hot-{team}", "labels": labels}, "provisioner": "nfs.csi.k8s.io",
                "parameters": {"server": "nfs-hot-01.dc1.internal", "share": f"/exports/{team}"}})]


def judge(policy: dict[str, Any], binding: dict[str, Any]) -> list[str]:
    admission = [resource(isolation.POLICY_TYPE, "isolation", policy),
                 resource(isolation.BINDING_TYPE, "isolation-binding", binding)]
    return judge_stack(isolation.TEAM_STORAGE_ISOLATED, *[r for t in TEAMS for r in team_resources(t)],
                       *admission).messages


def edited(manifest: dict[str, Any], edit: Any) -> dict[str, Any]:
    copied = copy.deepcopy(manifest)
    edit(copied)
    return copied


POLICY, BINDING = team_isolation_policy(SITE), team_isolation_binding()
OTHER_CLAIM = "Namespace {0}-namespace (team {0}): a claim on team {1}'s nfs-hot-{1} is admitted"
OTHER_POD = "a pod mounting team {1}'s share by NFS is admitted"


@pytest.mark.parametrize(("policy", "binding", "expected"), [
    pytest.param(POLICY, BINDING, [], id="should admit the stack's policy, which keeps each team to its own"),
    pytest.param(POLICY, edited(BINDING, lambda b: b["spec"].update(validationActions=["Audit"])),
                 [f"{OTHER_CLAIM.format('speech', 'vision')}; {OTHER_POD.format('speech', 'vision')}",
                  f"{OTHER_CLAIM.format('vision', 'speech')}; {OTHER_POD.format('vision', 'speech')}"],
                 id="should deny a binding that only audits"),
    pytest.param(edited(POLICY, lambda p: p["spec"]["validations"].pop(0)), BINDING,
                 [OTHER_CLAIM.format("speech", "vision"), OTHER_CLAIM.format("vision", "speech")],
                 id="should deny a policy without the claim rule"),
    pytest.param(edited(POLICY, lambda p: p["spec"]["validations"].pop(1)), BINDING,
                 ["Namespace speech-namespace (team speech): " + OTHER_POD.format("speech", "vision"),
                  "Namespace vision-namespace (team vision): " + OTHER_POD.format("vision", "speech")],
                 id="should deny a policy that lets pods mount NFS"),
    pytest.param(POLICY, edited(BINDING, lambda b: b["spec"]["matchResources"].update(
        namespaceSelector={"matchLabels": {"tier": "prod"}})),
                 [f"{OTHER_CLAIM.format('speech', 'vision')}; {OTHER_POD.format('speech', 'vision')}",
                  f"{OTHER_CLAIM.format('vision', 'speech')}; {OTHER_POD.format('vision', 'speech')}"],
                 id="should deny a binding that selects no team namespace"),
    pytest.param(edited(POLICY, lambda p: p["spec"]["validations"][0].update(expression="false")), BINDING,
                 ["Namespace speech-namespace (team speech): a claim on its own nfs-hot-speech is denied",
                  "Namespace vision-namespace (team vision): a claim on its own nfs-hot-vision is denied"],
                 id="should deny a policy that shuts a team out of its own class"),
])
def test_team_storage_isolated(policy: dict[str, Any], binding: dict[str, Any], expected: list[str]) -> None:
    assert judge(policy, binding) == expected
