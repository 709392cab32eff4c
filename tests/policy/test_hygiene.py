"""Hygiene: Helm releases pinned; secret-like inputs sealed as Pulumi secrets by remediation."""

from typing import Any

import hygiene
import pytest
from pulumi_policy import Secret
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from tests.policy.builders import changed, judge_resource, remediate, secret

RELEASE: dict[str, Any] = {"chart": "gpu-operator", "version": "v25.3.3",
                           "repositoryOpts": {"repo": "https://helm.ngc.nvidia.com/nvidia"}}
R = "Release gpu-operator"


@pytest.mark.parametrize(("props", "expected"), [
    pytest.param(RELEASE, [], id="should admit a chart pinned to one version from a named repository"),
    pytest.param(changed(RELEASE, version="latest"), [f"{R}: chart gpu-operator has version 'latest'; pin one exact "
                                                      "release"], id="should deny a chart at latest"),
    pytest.param(changed(RELEASE, version="^25.3"), [f"{R}: chart gpu-operator has version '^25.3'; pin one exact "
                                                     "release"], id="should deny a chart version range"),
    pytest.param({k: v for k, v in RELEASE.items() if k != "version"},
                 [f"{R}: chart gpu-operator has version None; pin one exact release"],
                 id="should deny a chart without a version"),
    pytest.param(changed(RELEASE, repositoryOpts={}), [f"{R}: repositoryOpts.repo is missing"],
                 id="should deny a chart without a repository"),
    pytest.param({"chart": "oci://ghcr.io/nvidia/gpu-operator", "version": "25.3.3"}, [],
                 id="should admit an OCI chart that names its registry"),
    pytest.param({"chart": "/srv/charts/gpu-operator-v25.3.3.tgz", "version": "v25.3.3"}, [],
                 id="should admit the pinned version's archive of a site's chart mirror folder"),
    pytest.param({"chart": "/srv/charts/gpu-operator-v25.10.1.tgz", "version": "v25.3.3"},
                 [f"{R}: chart archive /srv/charts/gpu-operator-v25.10.1.tgz is not the pinned version v25.3.3"],
                 id="should deny a mirror archive of another version"),
    pytest.param(changed(RELEASE, version=UNKNOWN_STRING_VALUE),
                 [f"{R}: version is unknown at preview; this policy fails closed"],
                 id="should deny a chart version unknown at preview"),
])
def test_helm_release_pinned(props: dict[str, Any], expected: list[str]) -> None:
    outcome = judge_resource(hygiene.HELM_RELEASE_PINNED, hygiene.HELM_RELEASE_TYPE, "gpu-operator", props)
    assert outcome.messages == expected


def test_should_leave_other_resources_to_other_policies() -> None:
    assert judge_resource(hygiene.HELM_RELEASE_PINNED, "kubernetes:core/v1:ConfigMap", "c", {"version": "x"}) \
        .messages == []


def sealed_paths(value: Any, path: str = "") -> list[str]:
    if isinstance(value, Secret):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in sealed_paths(v, f"{path}.{k}" if path else k)]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in sealed_paths(v, f"{path}[{i}]")]
    return []


@pytest.mark.parametrize(("wire", "sealed"), [
    pytest.param({"connection": {"host": "10.0.0.1", "privateKey": "-----BEGIN"}, "bmc_password": "hunter2",
                  "webhooks": [{"url": "https://hooks", "slackToken": "xoxb"}]},
                 ["connection.privateKey", "bmc_password", "webhooks[0].slackToken"],
                 id="should seal plaintext keys, passwords and tokens wherever they sit"),
    pytest.param({"connection": secret({"host": "10.0.0.1", "privateKey": "-----BEGIN"}), "api-key": secret("k")},
                 None, id="should leave inputs that are already secrets alone"),
    pytest.param({"stringData": {"secretName": "bmc", "user": "root"}, "tokenTtl": 3600}, None,
                 id="should leave names and numbers under other keys alone"),
    pytest.param({"volumes": [{"name": "notify", "secret": {"secretName": "alertmanager-notify"}}]}, None,
                 id="should leave a volume that references a Kubernetes Secret alone"),
    pytest.param({"tokens": {"slackToken": ["xoxb-1", "xoxb-2"]}}, ["tokens.slackToken[0]", "tokens.slackToken[1]"],
                 id="should seal each string in a list under a secret-like key"),
    pytest.param({"model_list": [{"litellm_params": {"api_key": "os.environ/OPENAI_API_KEY"}},
                                 {"litellm_params": {"api_key": "sk-live-123"}}]},
                 ["model_list[1].litellm_params.api_key"],
                 id="should leave a LiteLLM environment reference alone and seal a key written out"),
])
def test_secrets_stay_secret(wire: dict[str, Any], sealed: list[str] | None) -> None:
    result = remediate(hygiene.SECRETS_STAY_SECRET, "command:remote:Command", "gpu-a800-01-node-check", wire)
    assert (sealed_paths(result) if result is not None else None) == sealed


def test_should_keep_the_sealed_values_and_everything_else() -> None:
    result = remediate(hygiene.SECRETS_STAY_SECRET, "test:index:Thing", "t", {"password": "p", "user": "root"})
    assert result is not None
    assert (result["password"].value, result["user"]) == ("p", "root")
