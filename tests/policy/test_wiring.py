"""Wire before traffic: serving resources depend on the monitoring stack, directly, through a descendant or a parent."""

from collections.abc import Callable

import pytest
import wiring
from common import MONITORING_STACK_TYPE, SLURM_TYPE
from pulumi_policy import PolicyResource
from pulumi_policy.proxy import UNKNOWN_OBJECT_VALUE

from tests.policy.builders import judge_stack, resource

TEAM_NS = {"metadata": {"name": "team-nlp", "labels": {"gpucluster.io/team": "nlp"}}}
MONITORING = resource(MONITORING_STACK_TYPE, "prod-monitoring")
PROMETHEUS = resource("kubernetes:helm.sh/v3:Release", "prod-monitoring-prometheus", {}, MONITORING)
TEAM = resource("gpucluster:team:Team", "nlp", {}, None, (PROMETHEUS,))

Build = Callable[[], list[PolicyResource]]


def namespace(deps: tuple[PolicyResource, ...] = (), parent: PolicyResource | None = None,
              props: dict[str, object] | None = None) -> PolicyResource:
    return resource(wiring.NAMESPACE_TYPE, "team-nlp", TEAM_NS if props is None else props, parent, deps)


UNWIRED = ("{} serves traffic but neither it nor its parents depend on the monitoring stack; "
           "add depends_on=[monitoring] to it or to its component")


@pytest.mark.parametrize(("build", "expected"), [
    pytest.param(lambda: [MONITORING, namespace()], [UNWIRED.format("Namespace team-nlp")],
                 id="should deny a team namespace that does not depend on monitoring"),
    pytest.param(lambda: [MONITORING, namespace((MONITORING,))], [],
                 id="should admit a team namespace that depends on the monitoring component"),
    pytest.param(lambda: [MONITORING, PROMETHEUS, namespace((PROMETHEUS,))], [],
                 id="should admit a team namespace that depends on a resource inside monitoring"),
    pytest.param(lambda: [MONITORING, PROMETHEUS, TEAM, namespace(parent=TEAM)], [],
                 id="should admit a team namespace whose parent depends on monitoring"),
    pytest.param(lambda: [namespace()], ["Namespace team-nlp serves traffic but there is no monitoring stack to "
                                         "depend on"], id="should deny serving resources without a monitoring stack"),
    pytest.param(lambda: [MONITORING, namespace(props={"metadata": {"name": "kube-system"}})], [],
                 id="should leave a namespace without a team label alone"),
    pytest.param(lambda: [MONITORING, namespace(props={"metadata": {"labels": UNKNOWN_OBJECT_VALUE}})],
                 ["Namespace team-nlp: metadata.labels is unknown at preview; this policy fails closed"],
                 id="should deny a namespace whose labels are unknown at preview"),
    pytest.param(lambda: [MONITORING, resource("kubernetes:kueue.x-k8s.io/v1beta1:LocalQueue", "nlp-queue")],
                 [UNWIRED.format("LocalQueue nlp-queue")], id="should deny an unwired Kueue LocalQueue"),
    pytest.param(lambda: [MONITORING, resource("kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue", "gpus")],
                 [UNWIRED.format("ClusterQueue gpus")], id="should deny an unwired Kueue ClusterQueue"),
    pytest.param(lambda: [MONITORING, resource("kubernetes:core/v1:ResourceQuota", "nlp-gpus")],
                 [UNWIRED.format("ResourceQuota nlp-gpus")], id="should deny an unwired ResourceQuota"),
    pytest.param(lambda: [MONITORING, resource("kubernetes:scheduling.k8s.io/v1:PriorityClass", "production")],
                 [UNWIRED.format("PriorityClass production")], id="should deny an unwired PriorityClass"),
    pytest.param(lambda: [MONITORING, resource(SLURM_TYPE, "prod-slurm")], [UNWIRED.format("Slurm prod-slurm")],
                 id="should deny an unwired Slurm component"),
    pytest.param(lambda: [MONITORING, resource("kubernetes:core/v1:ConfigMap", "nlp-settings")], [],
                 id="should leave resources that serve no traffic alone"),
])
def test_serving_after_monitoring(build: Build, expected: list[str]) -> None:
    assert judge_stack(wiring.SERVING_AFTER_MONITORING, *build()).messages == expected
