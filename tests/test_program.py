"""The whole program (`__main__.py`) under the offline engine, on the prod site and on broken ones."""

import json
import re
from collections import Counter

import pytest

from components.inference.values import ENGINE_KEY_SECRET
from components.site.wellknown import (
    CLUSTER_TYPE,
    COLD_TIER_TYPE,
    FACILITY_TYPE,
    GPU_NODE_TYPE,
    GPU_OPERATOR_TYPE,
    INFERENCE_TYPE,
    MONITORING_TYPE,
    PLATFORM_ACCOUNT,
    RACK_TYPE,
    SCHEDULING_TYPE,
    SLURM_TYPE,
    STORAGE_TYPE,
    TEAM_TYPE,
)
from runbooks.offline.engine import ProgramError, Resource, ResourceGraph, Secret, StackConfig, run_program
from runbooks.plan.converge import waits_for
from runbooks.plan.helm import RELEASE_TYPE
from tests.builders import REPO, encode, parse, prod_config, prod_config_at, prod_values, with_changes

NODE_URN = (
    "urn:pulumi:prod::gpu-cluster::gpucluster:cluster:GpuCluster$gpucluster:facility:Facility"
    "$gpucluster:facility:Rack$gpucluster:facility:GpuNode::gpu-a800-01"
)


@pytest.fixture(scope="module")
def graph() -> ResourceGraph:
    return run_program(REPO, "prod")


COPY_TYPE, CHECK_TYPE = "command:remote:CopyToRemote", "command:remote:Command"
PATCH_TYPE = "kubernetes:core/v1:NodePatch"
K8S_PROVIDER = "urn:pulumi:prod::gpu-cluster::pulumi:providers:kubernetes::k8s"


def test_should_register_exactly_the_modelled_resources(graph: ResourceGraph) -> None:
    assert Counter(r.type for r in graph.resources.values()) == {
        "pulumi:pulumi:Stack": 1, "pulumi:providers:kubernetes": 1,
        CLUSTER_TYPE: 1, FACILITY_TYPE: 1, RACK_TYPE: 4, GPU_NODE_TYPE: 16,
        # the node check's program on 16 nodes; the checkpoint mover on each of the 10 Slurm nodes
        COPY_TYPE: 16 + 10, PATCH_TYPE: 16,
        # 16 node checks; Slurm: controller config, accounting, the lending controller's release, and one command
        # for each of 10 nodes (its install and its admission)
        CHECK_TYPE: 16 + 3 + 10,
        GPU_OPERATOR_TYPE: 1, MONITORING_TYPE: 1, STORAGE_TYPE: 1, COLD_TIER_TYPE: 1, SLURM_TYPE: 1,
        SCHEDULING_TYPE: 1, INFERENCE_TYPE: 1,
        # no Team: prod's first stage, platform, onboards none
        # gpu-operator, monitoring, storage, rook-ceph, kueue-system, inference, keda, cnpg-system
        "kubernetes:core/v1:Namespace": 8,
        "kubernetes:core/v1:ConfigMap": 7,  # DCGM counters, 5 dashboards, the checkpoint mover
        # gpu-operator, kube-prometheus-stack, victoria-metrics, local volumes, NFS CSI, Rook operator and cluster,
        # Kueue; KEDA, CloudNativePG and the gateway's database, the model servers, the gateway
        "kubernetes:helm.sh/v3:Release": 8 + 5,
        "kubernetes:monitoring.coreos.com/v1:PrometheusRule": 1,
        "kubernetes:monitoring.coreos.com/v1:ServiceMonitor": 2,  # DCGM exporter, LLM gateway
        # the gateway's master key, the model servers' API key; the platform account's gateway key, created by a local
        # command
        "kubernetes:core/v1:Secret": 2 + 1, "command:local:Command": 1,
        "kubernetes:networking.k8s.io/v1:NetworkPolicy": 2,  # per served model: only the gateway and the scrape in
        "kubernetes:storage.k8s.io/v1:StorageClass": 1,  # NVMe (a team's NFS hot class comes with the team)
        "kubernetes:apps/v1:DaemonSet": 1,  # the NVMe model-cache prefetch
        "kubernetes:apps/v1:DeploymentPatch": 1,  # the gateway's PriorityClass, for which its chart has no value
        "kubernetes:batch/v1:CronJob": 2,  # a checkpoint mover per NFS server
        "kubernetes:core/v1:PersistentVolumeClaim": 1,  # the CephFS checkpoint archive
        "kubernetes:scheduling.k8s.io/v1:PriorityClass": 4,  # inference, production, staging, dev
        "kubernetes:kueue.x-k8s.io/v1beta1:ResourceFlavor": 3,  # A800 and RTX 4090 on kubernetes, A800 on flex
        # one per pool Kubernetes uses (a team's queue, quotas and LocalQueue come with the team)
        "kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue": 2,
        # each team on its own storage, and GPU pods off Slurm's and unlent flex nodes, enforced by the API server
        # (bound by the team label: in force before the first team's namespace exists)
        # the lending and health controllers' kubeconfig identities: a ClusterRole each, and a Role in the inference
        # namespace for the lent models' replica floor (components/scheduling/controller_access.py)
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole": 2,
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding": 2,
        "kubernetes:rbac.authorization.k8s.io/v1:Role": 1, "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding": 1,
        "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy": 2,
        "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding": 2,
    }


def test_should_wire_monitoring_before_nodes_gpus_storage_and_slurm(graph: ResourceGraph) -> None:
    (stack,) = graph.of_type(MONITORING_TYPE)
    monitored = {r.urn for r in graph.resources.values() if stack in graph.ancestors(r.urn)}
    for served in [*graph.of_type(FACILITY_TYPE), *graph.of_type(GPU_OPERATOR_TYPE), *graph.of_type(STORAGE_TYPE),
                   *graph.of_type(SLURM_TYPE), *graph.of_type(SCHEDULING_TYPE), *graph.of_type(INFERENCE_TYPE)]:
        # The SDK sends a dependency on a component as its custom descendants; a component's children do not inherit
        # it, so each resource inside must carry it itself.
        inside = [r for r in graph.resources.values() if served in graph.ancestors(r.urn) and r.custom]
        for resource in [served, *inside]:
            assert monitored <= set(resource.dependencies), resource.name


def release(graph: ResourceGraph, name: str) -> Resource:
    (found,) = [r for r in graph.of_type(RELEASE_TYPE) if r.inputs["name"] == name]
    return found


def test_should_create_the_metric_volumes_class_before_the_monitoring_stack(graph: ResourceGraph) -> None:
    # Prometheus and VictoriaMetrics claim volumes of the cold tier's class, which the rook-ceph-cluster release
    # creates: their releases wait for it, or they wait 300 s on claims that cannot bind.
    ceph = release(graph, "rook-ceph-cluster")
    for metrics in ("kube-prometheus-stack", "metrics-cold"):
        assert ceph.urn in release(graph, metrics).dependencies, metrics
    # The cold tier alone comes first: the rest of the storage still waits for monitoring.
    (stack,) = graph.of_type(MONITORING_TYPE)
    assert not any(stack in graph.ancestors(d) for d in ceph.dependencies)


def test_should_create_the_inference_path_after_every_resource_of_the_facility(graph: ResourceGraph) -> None:
    """The path names the nodes' NodePatches alone (components/cluster.py says why); each comes after its node's check,
    and the check after its copy, so every node's admission still comes first, through them, as the plan's converge
    check reads the order."""
    facility = {r.urn for r in graph.resources.values()
                if r.custom and any(a.type == FACILITY_TYPE for a in graph.ancestors(r.urn))}
    path = [r for r in graph.resources.values() if r.custom and any(a.type == INFERENCE_TYPE
                                                                    for a in graph.ancestors(r.urn))]
    assert len(facility) == 3 * len(graph.of_type(GPU_NODE_TYPE)) and path
    for resource in path:
        assert facility <= waits_for(graph, resource.urn), resource.name


def test_should_start_model_servers_only_on_admitted_nodes_and_wait_for_their_startup(graph: ResourceGraph) -> None:
    engines = release(graph, "vllm")
    # The engines' pods select validated nodes, which only the node checks' NodePatches label.
    assert {p.urn for p in graph.of_type(PATCH_TYPE)} <= set(engines.dependencies)
    # vllm-stack's startup probe allows 15 + 60 x 10 s to load the weights; the release waits at least that.
    probe = engines.inputs["values"]["servingEngineSpec"]["startupProbe"]
    window = probe["initialDelaySeconds"] + probe["failureThreshold"] * probe["periodSeconds"]
    assert engines.inputs["timeout"] >= window == 615


def test_should_lock_each_model_server_to_the_gateway_before_it_serves(graph: ResourceGraph) -> None:
    (key,) = [r for r in graph.of_type("kubernetes:core/v1:Secret")
              if r.inputs["metadata"]["name"] == ENGINE_KEY_SECRET]
    assert key.inputs["stringData"] == Secret(), "the engines' key is in plain inputs"
    policies = {r.inputs["metadata"]["name"]: r for r in graph.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")}
    assert set(policies) == {f"vllm-{m.name}-ingress" for m in parse(prod_values()).inference.models}
    (engines,) = [r for r in graph.of_type(RELEASE_TYPE) if r.inputs["name"] == "vllm"]
    assert {key.urn, *(p.urn for p in policies.values())} <= set(engines.dependencies)


def test_should_open_a_gateway_account_per_onboarded_team_and_close_it_on_rollback(
        stages: dict[str, ResourceGraph]) -> None:
    graph = stages["canary"]
    accounts = {r.name.removeprefix("prod-inference-gateway-team-"): r for r in graph.of_type("command:local:Command")}
    assert set(accounts) == {"nlp-foundation", "speech", PLATFORM_ACCOUNT}
    (gateway,) = [r for r in graph.of_type(RELEASE_TYPE) if r.inputs["name"] == "llm-gateway"]
    for team, account in accounts.items():
        if team == PLATFORM_ACCOUNT:
            continue  # test_should_give_the_platform_a_gateway_account_from_the_first_stage
        assert account.inputs["create"].startswith("gpuctl gateway ensure-team --url ")
        assert f"--team {team} " in account.inputs["create"]
        assert account.inputs["delete"].endswith(f"remove-team --url http://llm-gateway-litellm.inference.svc:4000 "
                                                 f"--team {team}")
        # A budget change updates the account in place; a trigger would replace it, and the old account's delete
        # would then remove the team.
        assert account.inputs["update"] == account.inputs["create"] and "triggers" not in account.inputs
        assert account.inputs["environment"] == Secret()  # the master key: the whole map is a secret
        # After the gateway and the team's namespace; the key it prints lands in that namespace as a Secret.
        namespace = next(r for r in graph.resources.values() if r.name == f"prod-team-{team}-namespace")
        assert {gateway.urn, namespace.urn} <= set(account.dependencies)
        (key,) = [r for r in graph.of_type("kubernetes:core/v1:Secret")
                  if r.name == f"prod-inference-gateway-key-{team}"]
        assert key.inputs["metadata"]["namespace"] == team and account.urn in key.dependencies


def test_should_give_the_platform_a_gateway_account_from_the_first_stage(graph: ResourceGraph) -> None:
    # The acceptance campaign loads the gateway before any team exists: its key is the platform account's.
    (account,) = graph.of_type("command:local:Command")
    assert account.name == f"prod-inference-gateway-team-{PLATFORM_ACCOUNT}"
    assert f"--team {PLATFORM_ACCOUNT} " in account.inputs["create"]
    # Every served model, whichever teams it is for; no external API, which another party bills.
    assert account.inputs["create"].endswith("--model qwen2-5-72b --model llama-3-1-8b")
    assert account.inputs["environment"] == Secret()
    (key,) = [r for r in graph.of_type("kubernetes:core/v1:Secret") if account.urn in r.dependencies]
    assert key.inputs["metadata"] == {"name": "llm-gateway-platform", "namespace": "inference"}


def test_should_check_a_node_only_once_the_gpu_operator_is_installed(graph: ResourceGraph) -> None:
    (operator,) = graph.of_type(GPU_OPERATOR_TYPE)
    (release,) = [r for r in graph.resources.values() if r.parent == operator.urn and r.type == RELEASE_TYPE]
    for copy in graph.of_type(COPY_TYPE):
        if graph.resources[copy.parent].type == GPU_NODE_TYPE:
            assert release.urn in copy.dependencies, copy.name


def test_should_send_the_munge_key_only_as_a_secret_stdin(graph: ResourceGraph) -> None:
    hosts = [r for r in graph.of_type(CHECK_TYPE)
             if r.name == "prod-slurm-controller-config" or r.name.startswith("prod-slurm-gpu-")]
    assert len(hosts) == 1 + 10
    for command in hosts:
        # The script stays plain, so the plan's readers see every file; the key is the secret stdin alone.
        assert isinstance(command.inputs["create"], str) and command.inputs["stdin"] == Secret(), command.name
        assert "munge.key.new" in command.inputs["create"]


def test_should_check_each_node_over_ssh_before_admitting_it(graph: ResourceGraph) -> None:
    for node in graph.of_type(GPU_NODE_TYPE):
        kids = {r.type: r for r in graph.resources.values() if r.parent == node.urn}
        assert set(kids) == {COPY_TYPE, CHECK_TYPE, PATCH_TYPE}
        check = kids[CHECK_TYPE]
        assert kids[COPY_TYPE].urn in check.dependencies
        assert check.inputs["connection"] == Secret() == kids[COPY_TYPE].inputs["connection"]
        assert f"--node {node.name} " in check.inputs["create"]
        assert kids[PATCH_TYPE].options["provider"].startswith(K8S_PROVIDER + "::")
        assert kids[PATCH_TYPE].inputs["metadata"]["name"] == node.name


def test_should_keep_a_node_without_a_result_tainted(graph: ResourceGraph) -> None:
    # Offline there is no node-check output: every node stays unvalidated, tainted, out of Slurm.
    patch = graph.resources[NODE_URN.replace("::gpu-a800-01", f"${PATCH_TYPE}::gpu-a800-01-admission")]
    assert patch.inputs["metadata"]["labels"]["gpucluster.io/validated"] == "false"
    unvalidated = {"key": "gpucluster.io/unvalidated", "value": "true", "effect": "NoSchedule"}
    assert unvalidated in patch.inputs["spec"]["taints"]
    assert graph.resources[NODE_URN].outputs["validated"] is False


def test_should_parent_nodes_under_their_rack(graph: ResourceGraph) -> None:
    assert [(r.type, r.name) for r in graph.ancestors(NODE_URN)] == [
        (RACK_TYPE, "a01"), (FACILITY_TYPE, "prod-facility"), (CLUSTER_TYPE, "prod"),
        ("pulumi:pulumi:Stack", "gpu-cluster-prod"),
    ]


def test_should_give_policies_the_rack_figures_as_inputs_and_outputs(graph: ResourceGraph) -> None:
    (a01,) = [r for r in graph.of_type(RACK_TYPE) if r.name == "a01"]
    assert a01.inputs == a01.outputs
    assert a01.outputs["heat_load_kw"] == pytest.approx(25.957)
    assert a01.outputs["heat_load_kw"] <= a01.outputs["cooling_capacity_kw"] == 40
    assert a01.outputs["it_load_kw"] <= a01.outputs["usable_kw"] == 32
    assert all(a01.outputs["verdicts"].values())
    node = graph.resources[NODE_URN].outputs
    assert node == {"rack": "a01", "node_group": "a800-train", "pool": "slurm", "gpu_model": "A800-SXM4-80GB",
                    "gpu_class": "dense", "gpu_count": 8, "draw_kw": pytest.approx(6.489),
                    "validated": False, "validation_reason": "no node-check result yet"}


def test_should_export_gpu_count_and_stage(graph: ResourceGraph) -> None:
    assert graph.stack_outputs == {"gpu_count": 128, "stage": "platform"}


def test_should_register_nothing_on_an_invalid_spec() -> None:
    config = prod_config()
    broken = encode(with_changes(prod_values(), racks__0__power_budget_kw=20))
    values = {**config.values, **{f"gpu-cluster:{k}": v for k, v in broken.items()}}
    with pytest.raises(ProgramError) as caught:
        run_program(REPO, "prod", StackConfig(config.project, values, config.secret_keys))
    assert "racks[0].power_budget_kw: planned draw 26.0 kW" in str(caught.value)
    assert [r.type for r in caught.value.registered.values()] == ["pulumi:pulumi:Stack"]


def test_should_keep_the_secret_config_out_of_every_resource(graph: ResourceGraph) -> None:
    dumped = json.dumps([(r.inputs, r.outputs) for r in graph.resources.values()], default=repr)
    assert "secret not decrypted" not in dumped




# --- stages: each onboards its teams and nothing else; advancing never touches an earlier team ------------------

STAGE_TEAMS = {
    "platform": [],
    "canary": ["nlp-foundation", "speech"],
    "half": ["nlp-foundation", "speech", "vision", "multimodal", "rl", "code-llm"],
    "full": ["nlp-foundation", "speech", "vision", "multimodal", "rl", "code-llm", "safety", "recsys", "bio-ai",
             "robotics", "agents", "eval"],
}


@pytest.fixture(scope="module")
def stages(graph: ResourceGraph) -> dict[str, ResourceGraph]:
    return {"platform": graph,
            **{stage: run_program(REPO, "prod", prod_config_at(stage)) for stage in ("canary", "half", "full")}}


def team_resources(graph: ResourceGraph) -> dict[str, Resource]:
    """Every resource in a Team component, and the Team itself, by URN."""
    teams = {t.urn for t in graph.of_type(TEAM_TYPE)}
    return {r.urn: r for r in graph.resources.values() if r.urn in teams or r.parent in teams}


@pytest.mark.parametrize("stage", list(STAGE_TEAMS), ids=lambda s: f"{s} onboards its teams and nothing else")
def test_should_onboard_exactly_the_stages_teams(stages: dict[str, ResourceGraph], stage: str) -> None:
    graph = stages[stage]
    teams = STAGE_TEAMS[stage]
    # Registration runs on a thread pool: compare as sets.
    assert sorted(t.outputs["team"] for t in graph.of_type(TEAM_TYPE)) == sorted(teams)
    labelled = [r.inputs["metadata"]["name"] for r in graph.of_type("kubernetes:core/v1:Namespace")
                if "gpucluster.io/team" in (r.inputs["metadata"].get("labels") or {})]
    assert sorted(labelled) == sorted(teams)
    kinds = Counter(r.type for r in team_resources(graph).values())
    assert kinds == Counter({**dict.fromkeys([TEAM_TYPE, "kubernetes:core/v1:Namespace",
                                      "kubernetes:storage.k8s.io/v1:StorageClass",
                                      "kubernetes:kueue.x-k8s.io/v1beta1:LocalQueue",
                                      "kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue"], len(teams)),
                     # the GPU quota, and zero pods of the PriorityClasses teams may not use
                     "kubernetes:core/v1:ResourceQuota": 2 * len(teams)})
    (slurm,) = graph.of_type(SLURM_TYPE)
    (accounting,) = [r for r in graph.resources.values() if r.name == "prod-slurm-accounting"]
    # The platform account first, at every stage: the operators' (the acceptance campaign's) jobs run under it.
    assert f"add account {','.join([PLATFORM_ACCOUNT, *teams])} " in accounting.inputs["create"]
    assert slurm.outputs["qos"] == stages["platform"].of_type(SLURM_TYPE)[0].outputs["qos"]
    gateway = {r.name.removeprefix("prod-inference-gateway-team-") for r in graph.of_type("command:local:Command")}
    assert gateway == {PLATFORM_ACCOUNT, *teams}


def test_should_register_no_team_at_the_first_pulumi_up_of_prod(graph: ResourceGraph) -> None:
    # Pulumi.prod.yaml as shipped: what a plain `pulumi up` deploys before any acceptance campaign or approval.
    assert graph.stack_outputs["stage"] == "platform"
    assert not graph.of_type(TEAM_TYPE)
    assert [r.name for r in graph.of_type("kubernetes:core/v1:Namespace")
            if "gpucluster.io/team" in (r.inputs["metadata"].get("labels") or {})] == []
    assert not graph.of_type("kubernetes:core/v1:ResourceQuota")
    assert not graph.of_type("kubernetes:kueue.x-k8s.io/v1beta1:LocalQueue")
    # No team's Slurm account: the accounting adds the platform's alone, and gives no team a fairshare.
    (accounting,) = [r for r in graph.resources.values() if r.name == "prod-slurm-accounting"]
    script = accounting.inputs["create"]
    named = {a for listed in re.findall(r"(?:add account|name=)([-a-z0-9_,]+)", script) for a in listed.split(",")}
    assert f"add account {PLATFORM_ACCOUNT} " in script and "fairshare=" not in script
    assert not named & {t["name"] for t in prod_values()["teams"]}
    # No team's gateway key: the one account is the platform's.
    assert [r.name for r in graph.of_type("command:local:Command")] == [
        f"prod-inference-gateway-team-{PLATFORM_ACCOUNT}"]


@pytest.mark.parametrize(("before", "after"), [("platform", "canary"), ("canary", "half"), ("half", "full")],
                         ids=["platform to canary touches no team resource", "canary to half keeps the canary teams "
                              "as they were", "half to full keeps the six"])
def test_should_leave_existing_teams_identical_when_the_stage_advances(stages: dict[str, ResourceGraph], before: str,
                                                                     after: str) -> None:
    earlier, later = team_resources(stages[before]), team_resources(stages[after])
    assert set(earlier) < set(later)
    for urn, resource in earlier.items():
        assert (later[urn].inputs, later[urn].parent, sorted(later[urn].dependencies)) == (
            resource.inputs, resource.parent, sorted(resource.dependencies)), urn


def test_should_make_every_team_resource_wait_for_monitoring(stages: dict[str, ResourceGraph]) -> None:
    graph = stages["full"]
    (stack,) = graph.of_type(MONITORING_TYPE)
    for team in graph.of_type(TEAM_TYPE):
        assert any(stack in graph.ancestors(dep) for dep in team.dependencies), team.name


@pytest.mark.parametrize(
    ("stage", "message"),
    [
        pytest.param("beta", 'stage: no stage named "beta" (known: platform, canary, half, full)',
                     id="rejects an unknown stage"),
        pytest.param("Half", "stage: String should match pattern", id="rejects a stage that is not a DNS label"),
    ],
)
def test_should_register_nothing_at_an_invalid_stage(stage: str, message: str) -> None:
    with pytest.raises(ProgramError) as caught:
        run_program(REPO, "prod", prod_config_at(stage))
    assert message in str(caught.value)
    assert [r.type for r in caught.value.registered.values()] == ["pulumi:pulumi:Stack"]
