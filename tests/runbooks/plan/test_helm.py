"""Every release of the prod stack rendered by the real Helm from the chart mirror, every object validated, and the
settings that only count where the chart really reads them, read back from what Helm rendered."""

import base64
import copy
import dataclasses
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from typer.testing import CliRunner

from components.inference.demand import DEMAND_QUERIES, demand_queries
from components.inference.values import NAMESPACE, gateway_config
from components.monitoring.prometheus import COLD_DATASOURCE, metrics_volumes
from components.scheduling.lending_decision import lent_models
from components.site.wellknown import HPC_JOB_MAPPING_DIR, POOL_TAINT, TEXTFILE_DIR, UNVALIDATED_TAINT
from components.supplied import operator_supplied
from runbooks.cli import app
from runbooks.offline.engine import Resource, ResourceGraph, run_program
from runbooks.plan.converge import installs
from runbooks.plan.helm import (
    RELEASE_TYPE,
    HelmError,
    RenderedRelease,
    Renders,
    find_helm,
    release_yaml_workers,
    render_releases,
    validate,
    yaml_workers,
)
from runbooks.plan.helm import template as helm_template
from runbooks.plan.invariants import check_invariants
from runbooks.plan.plan import host_installs, kubernetes_objects
from runbooks.plan.producers import Deployed, producers
from runbooks.plan.schemas import CoreVerdict, core_verdict
from runbooks.plan.yaml_stream import dump_all
from tests.builders import REPO, copy_project, parse, prod_values
from tests.harness.kubectl_refs import commands, namespaces_of, references, unresolved

MIRROR = REPO.parent / "shared" / "charts"
HELM = find_helm()
pytestmark = pytest.mark.skipif(HELM is None or not MIRROR.is_dir(),
                                reason="needs helm (make test installs it in .venv/bin) and the chart mirror "
                                       "../shared/charts")
KUBE_VERSION = "1.30"


@pytest.fixture(scope="module")
def graph() -> ResourceGraph:
    return run_program(REPO, "prod")


@pytest.fixture(scope="module")
def rendered(graph: ResourceGraph) -> dict[str, RenderedRelease]:
    assert HELM is not None
    return {r.release: r for r in render_releases(graph, MIRROR, KUBE_VERSION, HELM)}


def objects(release: RenderedRelease, kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in release.objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def test_should_render_every_release_and_validate_every_object(graph: ResourceGraph,
                                                               rendered: dict[str, RenderedRelease]) -> None:
    assert set(rendered) == {r.inputs["name"] for r in graph.of_type(RELEASE_TYPE)}
    assert all(r.objects for r in rendered.values())
    assert validate(list(rendered.values()), KUBE_VERSION) == []


def test_should_judge_each_core_object_in_its_yaml_worker_as_this_process_judges_it(
        rendered: dict[str, RenderedRelease]) -> None:
    # The workers judge each object as they parse it; one the plan changes after (a namespace placed: litellm-helm's
    # 6 objects and the GPU Operator's hook ServiceAccount on prod) is left to validate() to judge again.
    unjudged = []
    for release in rendered.values():
        assert len(release.verdicts) == len(release.objects), release.release
        for obj, verdict in zip(release.objects, release.verdicts, strict=True):
            if verdict is None:
                unjudged.append(obj)
                assert obj["metadata"]["namespace"] == release.namespace
            else:
                assert verdict == core_verdict(obj, KUBE_VERSION), (release.release, obj["kind"])
    assert len(unjudged) == 7
    assert sum(v is not None and v.schema for r in rendered.values() for v in r.verdicts) > 300


def test_should_report_what_a_yaml_worker_found(rendered: dict[str, RenderedRelease]) -> None:
    # validate() reports the worker's verdict and does not judge the object again.
    release = rendered["csi-driver-nfs"]
    planted = [CoreVerdict(schema=True, reason="spec: planted") if o["kind"] == "DaemonSet" else v
               for o, v in zip(release.objects, release.verdicts, strict=True)]
    found = validate([dataclasses.replace(release, verdicts=planted)], KUBE_VERSION)
    assert [(i.kind, i.reason) for i in found] == [("DaemonSet", "spec: planted")]


def with_object(release: RenderedRelease, obj: dict[str, Any]) -> list[RenderedRelease]:
    return [RenderedRelease(release.release, release.chart, release.version, release.namespace,
                            [*release.objects, obj])]


@pytest.mark.parametrize(("release", "kind", "edit", "reason"), [
    pytest.param("gpu-operator", "ClusterPolicy", lambda o: o["spec"]["dcgmExporter"].update(jobMapping={}),
                 "Additional properties are not allowed ('jobMapping' was unexpected)",
                 id="should reject a field the custom resource's CRD does not define"),
    pytest.param("csi-driver-nfs", "DaemonSet", lambda o: o["spec"]["template"]["spec"].update(tolerate=[]),
                 "Additional properties are not allowed ('tolerate' was unexpected)",
                 id="should reject a field Kubernetes does not define"),
    pytest.param("gpu-operator", "ClusterPolicy", lambda o: o.update(apiVersion="nvidia.com/v9"),
                 "no schema: neither Kubernetes 1.30 nor a rendered CRD defines nvidia.com/v9 ClusterPolicy",
                 id="should reject a kind no schema defines"),
])
def test_should_reject_what_the_api_server_would(rendered: dict[str, RenderedRelease], release: str, kind: str,
                                                 edit: Any, reason: str) -> None:
    changed = copy.deepcopy(objects(rendered[release], kind)[0])
    edit(changed)
    (invalid,) = validate(with_object(rendered[release], changed), KUBE_VERSION)
    assert reason in invalid.reason


def test_should_name_a_chart_the_mirror_lacks(graph: ResourceGraph, tmp_path: Path) -> None:
    assert HELM is not None
    with pytest.raises(HelmError, match=r"chart \S+ \S+ is not in the chart mirror .*: `helm pull"):
        render_releases(graph, tmp_path, KUBE_VERSION, HELM)


@pytest.mark.expected_s(20)
def test_should_start_each_release_rendering_while_the_program_still_runs(graph: ResourceGraph, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # `gpuctl plan` hands each release to Helm as the program registers it (the core the program leaves idle), not
    # once the program is over.
    program_over = threading.Event()
    started: dict[str, bool] = {}

    def run_program_then_mark(*args: Any) -> ResourceGraph:
        ran = run_program(*args)
        program_over.set()
        return ran

    def start(renders: Renders, resource: Resource) -> None:
        if resource.type == RELEASE_TYPE:
            started.setdefault(resource.urn, not program_over.is_set())
        real_start(renders, resource)

    real_start = Renders.start
    monkeypatch.setattr("runbooks.plan.plan.run_program", run_program_then_mark)
    monkeypatch.setattr(Renders, "start", start)
    planned = CliRunner().invoke(app, ["plan", "--project-dir", str(REPO), "--out", str(tmp_path / "plan"),
                                       "--chart-mirror", str(MIRROR)])
    assert planned.exit_code == 0, planned.output
    assert started == {r.urn: True for r in graph.of_type(RELEASE_TYPE)}
    assert "13 releases, 0 invalid" in " ".join(planned.output.split())


def test_should_fork_the_yaml_workers_before_the_first_helm_run(graph: ResourceGraph,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # A worker forked while a Helm run's pipe is open would hold its write end, and that run's reader would wait
    # until the worker exits.
    assert HELM is not None
    release_yaml_workers()
    workers_at_run: list[int] = []

    def counted(*args: Any) -> tuple[Path, str]:
        workers_at_run.append(yaml_workers.cache_info().currsize)
        return helm_template(*args)

    monkeypatch.setattr("runbooks.plan.helm.template", counted)
    assert len(render_releases(graph, MIRROR, KUBE_VERSION, HELM)) == len(graph.of_type(RELEASE_TYPE))
    assert workers_at_run == [1] * len(graph.of_type(RELEASE_TYPE))


@pytest.mark.expected_s(39)
def test_should_write_each_release_and_exit_1_when_a_chart_is_missing(rendered: dict[str, RenderedRelease],
                                                                     tmp_path: Path) -> None:
    project = copy_project(tmp_path)
    planned = CliRunner().invoke(app, ["plan", "--project-dir", str(project), "--out", str(tmp_path / "plan"),
                                       "--chart-mirror", str(MIRROR)])
    assert planned.exit_code == 0, planned.output
    assert "rendered objects in 13 releases, 0 invalid" in planned.output
    # helm/*.yaml holds Helm's own bytes (runbooks/plan/helm.py's streams): PyYAML reads back the objects the plan
    # judged, as it read the files the plan wrote before from those objects (PyYAML's writing of them).
    for release in rendered.values():
        written = list(yaml.safe_load_all((tmp_path / "plan" / "helm" / f"{release.release}.yaml").read_text()))
        assert written == release.objects == list(yaml.safe_load_all(dump_all(release.objects))), release.release
    assert any(o["kind"] == "Deployment" for o in rendered["kueue"].objects)
    empty = tmp_path / "empty-mirror"
    empty.mkdir()
    broken = CliRunner().invoke(app, ["plan", "--project-dir", str(project), "--out", str(tmp_path / "again"),
                                      "--chart-mirror", str(empty)])
    assert broken.exit_code == 1
    assert "is not in the chart mirror" in broken.output


# Settings that take effect only where the chart reads them: each was ignored or lost before.

def manager_config(rendered: dict[str, RenderedRelease]) -> dict[str, Any]:
    (config,) = objects(rendered["kueue"], "ConfigMap", "kueue-manager-config")
    return dict(yaml.safe_load(config["data"]["controller_manager_config.yaml"]))


def test_should_keep_kueues_api_client_limits(rendered: dict[str, RenderedRelease]) -> None:
    assert manager_config(rendered)["clientConnection"] == {"qps": 50, "burst": 100}


def tolerated(pod_spec: dict[str, Any], taint: str) -> bool:
    return any(t.get("operator") == "Exists" and t.get("key") in (taint, None) for t in pod_spec.get("tolerations")
               or [])


def test_should_run_the_nvme_provisioner_on_tainted_gpu_nodes(rendered: dict[str, RenderedRelease]) -> None:
    (daemonset,) = objects(rendered["local-static-provisioner"], "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert tolerated(pod, POOL_TAINT) and tolerated(pod, UNVALIDATED_TAINT)


def test_should_give_the_cold_storage_class_the_secrets_ceph_csi_provisions_with(
        rendered: dict[str, RenderedRelease]) -> None:
    (cold,) = objects(rendered["rook-ceph-cluster"], "StorageClass", "ceph-cold")
    secrets = {k: v for k, v in cold["parameters"].items() if k.startswith("csi.storage.k8s.io/") and "secret" in k}
    assert secrets == {f"csi.storage.k8s.io/{stage}-secret-{field}": value
                       for stage, name in (("provisioner", "rook-csi-cephfs-provisioner"),
                                           ("controller-expand", "rook-csi-cephfs-provisioner"),
                                           ("node-stage", "rook-csi-cephfs-node"))
                       for field, value in (("name", name), ("namespace", "rook-ceph"))}


def test_should_point_node_exporter_at_the_movers_textfile_directory(rendered: dict[str, RenderedRelease]) -> None:
    (daemonset,) = objects(rendered["kube-prometheus-stack"], "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    (exporter,) = [c for c in pod["containers"] if c["name"] == "node-exporter"]
    (root,) = [m for m in exporter["volumeMounts"] if m["name"] == "root"]
    (host_root,) = [v for v in pod["volumes"] if v["name"] == "root"]
    assert host_root["hostPath"]["path"] == "/"
    assert f"--collector.textfile.directory={root['mountPath']}{TEXTFILE_DIR}" in exporter["args"]
    # The chart's own filesystem excludes survive the list being replaced.
    assert sum(a.startswith("--collector.filesystem.") for a in exporter["args"]) == 2


def test_should_give_grafana_the_cold_tier_as_a_datasource(rendered: dict[str, RenderedRelease]) -> None:
    sources = [yaml.safe_load(c["data"]["datasource.yaml"])
               for c in objects(rendered["kube-prometheus-stack"], "ConfigMap")
               if "datasource.yaml" in (c.get("data") or {})]
    urls = {d["name"]: d["url"] for s in sources for d in s["datasources"]}
    (cold,) = [u for u in urls.values() if "victoria-metrics" in u]
    (write,) = {rw["url"] for p in objects(rendered["kube-prometheus-stack"], "Prometheus")
                for rw in p["spec"]["remoteWrite"]}
    assert write == f"{cold}/api/v1/write"


def test_should_mount_the_slurm_job_files_into_the_dcgm_exporter(rendered: dict[str, RenderedRelease]) -> None:
    # The operator turns this into the exporter's hostPath mount and DCGM_HPC_JOB_MAPPING_DIR
    # (gpu-operator controllers/object_controls.go, TransformDCGMExporter); the CRD must define it.
    (policy,) = objects(rendered["gpu-operator"], "ClusterPolicy")
    assert policy["spec"]["dcgmExporter"]["hpcJobMapping"] == {"enabled": True, "directory": HPC_JOB_MAPPING_DIR}
    assert validate([rendered["gpu-operator"]], KUBE_VERSION) == []


def test_should_label_tainted_gpu_nodes_so_the_operator_deploys_to_them(rendered: dict[str, RenderedRelease]) -> None:
    (worker,) = [d for d in objects(rendered["gpu-operator"], "DaemonSet") if "worker" in d["metadata"]["name"]]
    pod = worker["spec"]["template"]["spec"]
    assert tolerated(pod, POOL_TAINT) and tolerated(pod, UNVALIDATED_TAINT) and tolerated(pod, "nvidia.com/gpu")


def stack(graph: ResourceGraph, rendered: dict[str, RenderedRelease]) -> Deployed:
    """A copy of what the prod stack deploys, for a test to break."""
    by_urn = kubernetes_objects(graph)
    registered = list(by_urn.values())
    return copy.deepcopy(Deployed([o for r in rendered.values() for o in r.objects] + registered, registered,
                                  host_installs(graph), installs(graph, rendered.values(), by_urn),
                                  operator_supplied(parse(prod_values()))))


def broken(deployed: Deployed) -> dict[str, list[str]]:
    return {i.name: i.violations for i in check_invariants(deployed) if i.violations}


def test_should_hold_every_invariant_on_prod(graph: ResourceGraph, rendered: dict[str, RenderedRelease]) -> None:
    assert broken(stack(graph, rendered)) == {}


def find(deployed: Deployed, kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in deployed.objects if o["kind"] == kind and o["metadata"]["name"].endswith(name)]
    return found


def drop_tolerations(deployed: Deployed) -> None:
    find(deployed, "DaemonSet", "local-static-provisioner")["spec"]["template"]["spec"].pop("tolerations")


def gateway_reads_an_unsupplied_secret(deployed: Deployed) -> None:
    (container,) = find(deployed, "Deployment", "llm-gateway-litellm")["spec"]["template"]["spec"]["containers"]
    container["envFrom"] = [{"secretRef": {"name": "llm-provider-key"}}]


def gateway_at_engine_container_port(deployed: Deployed) -> None:
    """What main shipped until issue 35: the gateway asked the engines at the container's port, not the Service's."""
    configmap = find(deployed, "ConfigMap", "litellm-config")
    configmap["data"]["config.yaml"] = configmap["data"]["config.yaml"].replace("-engine-service.inference.svc:80/",
                                                                                "-engine-service.inference.svc:8000/")


def drop_ceph_secrets(deployed: Deployed) -> None:
    cold = find(deployed, "StorageClass", "ceph-cold")
    cold["parameters"] = {k: v for k, v in cold["parameters"].items() if "secret" not in k}


def disable_dcgm(deployed: Deployed) -> None:
    find(deployed, "ClusterPolicy", "cluster-policy")["spec"]["dcgmExporter"]["enabled"] = False


def drop_job_mapping(deployed: Deployed) -> None:
    find(deployed, "ClusterPolicy", "cluster-policy")["spec"]["dcgmExporter"]["hpcJobMapping"]["enabled"] = False


def drop_dcgm_scrape(deployed: Deployed) -> None:
    deployed.objects.remove(find(deployed, "ServiceMonitor", "dcgm-exporter"))


def edit_args(kind: str, name: str, edit: Any) -> Any:
    def mutate(deployed: Deployed) -> None:
        container = find(deployed, kind, name)["spec"]["template"]["spec"]["containers"][0]
        container["args"] = [edit(a) for a in container["args"]]
    return mutate


def drop_node_label_allowlist(arg: str) -> str:
    return "--metric-labels-allowlist=pods=[]" if arg.startswith("--metric-labels-allowlist") else arg


def move_textfile_directory(arg: str) -> str:
    return "--collector.textfile.directory=/host/root/srv" if arg.startswith("--collector.textfile") else arg


def move_slurm_scrape(deployed: Deployed) -> None:
    secret = find(deployed, "Secret", "prometheus-scrape-confg")
    (key,) = secret["data"]
    text = base64.b64decode(secret["data"][key]).decode().replace(":9341", ":9399")
    secret["data"][key] = base64.b64encode(text.encode()).decode()


def drop_cold_datasource(deployed: Deployed) -> None:
    configmap = find(deployed, "ConfigMap", "grafana-datasource")
    (key,) = configmap["data"]
    sources = yaml.safe_load(configmap["data"][key])
    sources["datasources"] = [d for d in sources["datasources"] if d["name"] != COLD_DATASOURCE]
    configmap["data"][key] = yaml.safe_dump(sources)


def drop_gateway_callback(deployed: Deployed) -> None:
    configmap = find(deployed, "ConfigMap", "litellm-config")
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    config["litellm_settings"]["callbacks"] = []
    configmap["data"]["config.yaml"] = yaml.safe_dump(config)


def drop_engine_scrape(deployed: Deployed) -> None:
    deployed.objects.remove(find(deployed, "ServiceMonitor", "engine-servicemonitor"))


def drop_pod_label_allowlist(arg: str) -> str:
    return "--metric-labels-allowlist=nodes=[gpucluster.io/flex-lent]" if arg.startswith(
        "--metric-labels-allowlist") else arg


def drop_mountstats(arg: str) -> str:
    return "--no-collector.mountstats" if arg == "--collector.mountstats" else arg


def empty_operand_tolerations(deployed: Deployed) -> None:
    find(deployed, "ClusterPolicy", "cluster-policy")["spec"]["daemonsets"]["tolerations"] = []


def drop_pools_policy(deployed: Deployed) -> None:
    deployed.objects.remove(find(deployed, "ValidatingAdmissionPolicy", "pools-exclusive"))


def refuse_inference_on_flex(deployed: Deployed) -> None:
    (flex,) = [v for v in find(deployed, "ValidatingAdmissionPolicy", "pools-exclusive")["spec"]["validations"]
               if "flex" in v["message"]]
    flex["expression"] = flex["expression"].replace("namespaceObject.metadata.name == 'inference' || ", "")


def drop_engine_policy(deployed: Deployed) -> None:
    """What main shipped until issue 41: no NetworkPolicy in front of the model servers."""
    deployed.objects.remove(find(deployed, "NetworkPolicy", "vllm-qwen2-5-72b-ingress"))


def widen_engine_policy(deployed: Deployed) -> None:
    """The gateway's rule taken to every namespace: a team's pod labelled as the gateway gets in."""
    (gateway,) = find(deployed, "NetworkPolicy", "vllm-qwen2-5-72b-ingress")["spec"]["ingress"][0]["from"]
    gateway["namespaceSelector"] = {}


def narrow_operand_tolerations(deployed: Deployed) -> None:
    daemonsets = find(deployed, "ClusterPolicy", "cluster-policy")["spec"]["daemonsets"]
    daemonsets["tolerations"] = [t for t in daemonsets["tolerations"] if t["key"] != POOL_TAINT]


RAW_UTIL = ("DCGM_FI_DEV_GPU_UTIL (read by gpuctl report gpu_utilization, rule gpu:dcgm_gpu_util:max, "
            "rule gpu_team:dcgm_owner:group)")


@pytest.mark.parametrize(("mutate", "invariant", "violation"), [
    pytest.param(drop_tolerations, "gpu-daemonsets-tolerate-taints",
                 "DaemonSet storage/local-static-provisioner does not tolerate gpucluster.io/unvalidated, "
                 "gpucluster.io/pool: it never runs on those nodes", id="should hold a DaemonSet without tolerations"),
    pytest.param(gateway_at_engine_container_port, "references-resolve",
                 "ConfigMap inference/llm-gateway-litellm-config data.config.yaml: "
                 "vllm-qwen2-5-72b-engine-service.inference.svc:8000 names port 8000, which Service "
                 "inference/vllm-qwen2-5-72b-engine-service does not have (it has 80, 9999, 55555)",
                 id="should hold a gateway that sends a model to a port its Service lacks"),
    pytest.param(gateway_reads_an_unsupplied_secret, "references-resolve",
                 "Deployment inference/llm-gateway-litellm container litellm envFrom: Secret "
                 "inference/llm-provider-key is rendered, registered or made by nothing the stack deploys, and no "
                 "operator is told to supply it (components/supplied.py)",
                 id="should hold a pod that needs a Secret nothing makes or supplies"),
    pytest.param(drop_ceph_secrets, "storage-classes-provisionable",
                 "StorageClass ceph-cold (rook-ceph.cephfs.csi.ceph.com) lacks "
                 "csi.storage.k8s.io/provisioner-secret-name, csi.storage.k8s.io/provisioner-secret-namespace, "
                 "csi.storage.k8s.io/controller-expand-secret-name, "
                 "csi.storage.k8s.io/controller-expand-secret-namespace, "
                 "csi.storage.k8s.io/node-stage-secret-name, csi.storage.k8s.io/node-stage-secret-namespace: "
                 "no volume can be provisioned", id="should hold a StorageClass without its CSI secrets"),
    pytest.param(disable_dcgm, "metrics-have-producers",
                 f"{RAW_UTIL} has no producer the stack deploys and scrapes (dcgm-exporter (GPU Operator): the "
                 "ClusterPolicy disables dcgmExporter)", id="should hold the DCGM exporter disabled in values"),
    pytest.param(drop_dcgm_scrape, "metrics-have-producers",
                 f"{RAW_UTIL} has no producer the stack deploys and scrapes (dcgm-exporter (GPU Operator): no "
                 "ServiceMonitor that a Prometheus selects scrapes it)", id="should hold the DCGM exporter unscraped"),
    pytest.param(drop_job_mapping, "metrics-have-producers",
                 "DCGM_FI_DEV_GPU_UTIL (read by rule gpu_team:dcgm_owner:group) is selected on label hpc_job, "
                 "which dcgm-exporter (GPU Operator) does not produce as deployed",
                 id="should hold Slurm attribution without the exporter's job mapping"),
    pytest.param(edit_args("Deployment", "kube-state-metrics", drop_node_label_allowlist), "metrics-have-producers",
                 "kube_node_labels (read by dashboard pools panel 'Flex nodes lent to inference', rule "
                 "SlurmNodesUnavailable) is selected on label label_gpucluster_io_flex_lent, which "
                 "kube-state-metrics does not produce as deployed",
                 id="should hold a node label kube-state-metrics does not allow"),
    pytest.param(edit_args("DaemonSet", "node-exporter", drop_mountstats), "metrics-have-producers",
                 "node_mountstats_nfs_operations_request_time_seconds_total (read by rule StorageJitter) has no "
                 "producer the stack deploys and scrapes (node-exporter mountstats collector: node-exporter runs "
                 "without --collector.mountstats (off by default))",
                 id="should hold storage jitter unmeasured without node-exporter's mountstats collector"),
    pytest.param(edit_args("DaemonSet", "node-exporter", move_textfile_directory), "metrics-have-producers",
                 "gpucluster_checkpoint_hot_fill_ratio (read by rule CheckpointHotTierFilling) has no producer the "
                 "stack deploys and scrapes (checkpoint mover via node-exporter's textfile collector: "
                 f"node-exporter reads /srv; the mover CronJobs write to {TEXTFILE_DIR})",
                 id="should hold node-exporter reading another textfile directory"),
    pytest.param(move_slurm_scrape, "metrics-have-producers",
                 "slurm_nodes_down (read by rule SlurmNodesUnavailable) has no producer the stack deploys and "
                 "scrapes (Slurm exporter (hosts/slurm_exporter.py): it listens on port 9341; Prometheus scrapes "
                 "no static target on that port (slurm-controller:9399, slurm-controller:9342, slurm-controller:9343))",
                 id="should hold the Slurm exporter scraped on the wrong port"),
    pytest.param(drop_gateway_callback, "metrics-have-producers",
                 "litellm_input_tokens_metric_total (read by rule team_model_token_type:llm_tokens:rate1h) has no "
                 "producer the stack deploys and scrapes (LLM gateway (LiteLLM proxy): the proxy's mounted config "
                 "enables no 'prometheus' callback)", id="should hold a gateway that exports no metrics"),
    pytest.param(drop_engine_scrape, "metrics-have-producers",
                 "vllm:num_requests_running (read by dashboard inference panel 'Requests running per model') has no "
                 "producer the stack deploys and scrapes (model servers (vLLM): vllm-qwen2-5-72b-deployment-vllm: "
                 "no ServiceMonitor that a Prometheus selects scrapes it; vllm-llama-3-1-8b-deployment-vllm: no "
                 "ServiceMonitor that a Prometheus selects scrapes it)", id="should hold model servers unscraped"),
    pytest.param(edit_args("Deployment", "kube-state-metrics", drop_pod_label_allowlist), "metrics-have-producers",
                 "kube_pod_labels (read by lending controller pending_pods) is selected on label "
                 "label_app_kubernetes_io_component, which kube-state-metrics does not produce as deployed",
                 id="should hold a pod label kube-state-metrics does not allow"),
    pytest.param(empty_operand_tolerations, "gpu-operands-tolerate-taints",
                 "ClusterPolicy cluster-policy: spec.daemonsets.tolerations is empty, so the operands keep the assets' "
                 "own (nvidia.com/gpu), which do not tolerate gpucluster.io/unvalidated, gpucluster.io/pool: the "
                 "driver, device plugin and DCGM exporter never run on those nodes",
                 id="should hold a ClusterPolicy without operand tolerations"),
    pytest.param(narrow_operand_tolerations, "gpu-operands-tolerate-taints",
                 "ClusterPolicy cluster-policy: spec.daemonsets.tolerations do not tolerate gpucluster.io/pool: the "
                 "driver, device plugin and DCGM exporter never run on those nodes",
                 id="should hold a ClusterPolicy whose operands do not tolerate the pool taint"),
    pytest.param(drop_pools_policy, "pools-exclusive",
                 # prod's first stage has no team: the namespace a team would get is judged before it exists
                 "nothing refuses a GPU pod in team namespace next-team tolerating the slurm pool's taint: it "
                 "would get GPUs Slurm also hands out", id="should hold GPU pods free to tolerate the slurm pool"),
    pytest.param(refuse_inference_on_flex, "pools-exclusive",
                 "Deployment inference/vllm-qwen2-5-72b-deployment-vllm: its pods are refused (pools-exclusive: only "
                 "the inference path's GPU pods may tolerate the flex pool's taint (gpucluster.io/pool=flex): a flex "
                 "node is Slurm's until lent to inference), and the stack itself creates them",
                 id="should hold an admission policy that refuses the stack's own model servers"),
    pytest.param(drop_engine_policy, "engines-admit-only-the-gateway",
                 "Deployment inference/vllm-qwen2-5-72b-deployment-vllm: no NetworkPolicy restricts ingress to its "
                 "pods: any pod of any namespace calls the model server with no gateway key, budget, model allow-list "
                 "or metering", id="should hold a model server any pod can call"),
    pytest.param(widen_engine_policy, "engines-admit-only-the-gateway",
                 "Deployment inference/vllm-qwen2-5-72b-deployment-vllm: a pod in team namespace any-team labelled as "
                 "Deployment inference/llm-gateway-litellm's pods is admitted on port 8000: a team calls the model "
                 "server past the gateway",
                 id="should hold a model server's policy widened to every namespace"),
    pytest.param(drop_cold_datasource, "dashboards-have-datasources",
                 "Prometheus monitoring/kube-prometheus-stack-prometheus writes to "
                 "http://metrics-cold-victoria-metrics-single-server.monitoring.svc:8428/api/v1/write, which no "
                 "Grafana data source reads", id="should hold a cold tier no dashboard can read"),
])
def test_should_break_exactly_one_invariant(graph: ResourceGraph, rendered: dict[str, RenderedRelease],
                                            mutate: Any, invariant: str, violation: str) -> None:
    deployed = stack(graph, rendered)
    mutate(deployed)
    found = broken(deployed)
    assert set(found) == {invariant}
    assert violation in found[invariant], "\n".join(found[invariant])


def test_should_keep_the_hot_and_cold_tiers_on_volumes_sized_from_retention_and_ingest(
        rendered: dict[str, RenderedRelease]) -> None:
    volumes = metrics_volumes(parse(prod_values()))
    (prometheus,) = objects(rendered["kube-prometheus-stack"], "Prometheus")
    claim = prometheus["spec"]["storage"]["volumeClaimTemplate"]["spec"]
    assert (claim["storageClassName"], claim["resources"]["requests"]["storage"]) == ("ceph-cold",
                                                                                     f"{volumes.hot_gib}Gi")
    assert prometheus["spec"]["retentionSize"] == f"{int(volumes.hot_gib * 0.9)}GB"
    (cold,) = objects(rendered["metrics-cold"], "StatefulSet")
    (template,) = cold["spec"]["volumeClaimTemplates"]
    assert template["spec"]["resources"]["requests"]["storage"] == f"{volumes.cold_gib}Gi"
    # 128 GPUs and 16 nodes: about 2,500 samples/s, 30 days hot at 2 B and a year cold at 1 B, 1.5x headroom.
    assert (round(volumes.samples_per_s), volumes.hot_gib, volumes.cold_gib) == (2512, 19, 111)


def test_should_hold_a_metrics_tier_without_a_volume(graph: ResourceGraph,
                                                     rendered: dict[str, RenderedRelease]) -> None:
    deployed = stack(graph, rendered)
    (prometheus,) = deployed.of_kind("Prometheus")
    del prometheus["spec"]["storage"]
    assert broken(deployed) == {"metrics-tiers-persist": [
        "Prometheus monitoring/kube-prometheus-stack-prometheus has no spec.storage.volumeClaimTemplate: its data "
        "dies with the pod"]}


def test_should_serve_each_model_from_the_nodes_prefetched_nvme_cache(graph: ResourceGraph,
                                                                     rendered: dict[str, RenderedRelease]) -> None:
    site = parse(prod_values())
    prefetch = find(stack(graph, rendered), "DaemonSet", "model-cache-prefetch")
    script = prefetch["spec"]["template"]["spec"]["initContainers"][0]["command"][2]
    prefetch_cache = {v["name"]: v for v in prefetch["spec"]["template"]["spec"]["volumes"]}["cache"]["hostPath"]
    for model in site.inference.models:
        (engine,) = objects(rendered["vllm"], "Deployment", f"vllm-{model.name}-deployment-vllm")
        pod = engine["spec"]["template"]["spec"]
        (server,) = pod["containers"]
        model_dir = server["command"][2]
        # The weights: a directory on a host path that is the prefetch's cache, under the model's revision.
        mounts = {m["mountPath"]: m for m in server["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        (mount,) = [m for path, m in mounts.items() if model_dir.startswith(path + "/")]
        assert mount["readOnly"] is True
        assert volumes[mount["name"]]["hostPath"] == prefetch_cache == {"path": site.storage.nvme.cache_path,
                                                                        "type": "Directory"}
        relative = model_dir.removeprefix(mount["mountPath"] + "/")
        assert relative == f"{model.source}/{model.revision}"
        assert f"cp -ru /models/{relative}/. /cache/{relative}/ && touch /cache/{relative}/.prefetched" in script
        # ... never the network: no network volume, the hub offline, and the pod waits for the prefetch's marker.
        assert not any("nfs" in v or "persistentVolumeClaim" in v for v in pod["volumes"])
        assert {"name": "HF_HUB_OFFLINE", "value": "1"} in server["env"]
        (wait,) = pod["initContainers"]
        assert f"until [ -f {model_dir}/.prefetched ]" in wait["command"][2]
        assert [m["name"] for m in wait["volumeMounts"]] == [mount["name"]]


def test_should_place_model_servers_as_inference_on_the_kubernetes_pool_or_lent_flex_nodes(
        rendered: dict[str, RenderedRelease]) -> None:
    site = parse(prod_values())
    for model in site.inference.models:
        (engine,) = objects(rendered["vllm"], "Deployment", f"vllm-{model.name}-deployment-vllm")
        pod = engine["spec"]["template"]["spec"]
        (server,) = pod["containers"]
        assert server["image"] == "vllm/vllm-openai:v0.10.2"
        assert pod["priorityClassName"] == "inference"
        assert server["resources"]["limits"]["nvidia.com/gpu"] == str(model.gpus_per_replica)
        args = server["command"]
        assert args[args.index("--tensor-parallel-size") + 1] == str(model.gpus_per_replica)
        assert args[args.index("--served-model-name") + 1] == model.name
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        pools = [{e["key"]: e["values"] for e in t["matchExpressions"]} for t in terms]
        assert [p["gpucluster.io/pool"] for p in pools] == [["kubernetes"], ["flex"]]
        assert pools[1]["gpucluster.io/flex-lent"] == ["true"]
        assert all(p["gpucluster.io/gpu-model"] == [model.gpu_model] and p["gpucluster.io/validated"] == ["true"]
                   for p in pools)
        assert {"key": POOL_TAINT, "operator": "Equal", "value": "flex", "effect": "NoSchedule"} in pod["tolerations"]
        # Readiness is vLLM's /health, up only once the weights are loaded; a new revision surges beside the old.
        assert server["readinessProbe"]["httpGet"]["path"] == "/health"
        assert engine["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": "100%", "maxUnavailable": 0}
        # KEDA owns the replica count, on the queue depth the engines export, within the spec's bounds.
        assert "replicas" not in engine["spec"]
        (scaler,) = objects(rendered["vllm"], "ScaledObject", f"vllm-{model.name}-scaledobject")
        assert (scaler["spec"]["minReplicaCount"], scaler["spec"]["maxReplicaCount"]) == (
            model.replicas.min, model.replicas.max + model.lent_replicas)
        (trigger,) = scaler["spec"]["triggers"]
        assert trigger["metadata"]["query"] == (
            f'sum(vllm:num_requests_waiting{{namespace="inference", model_name="{model.name}"}})')
        assert trigger["metadata"]["threshold"] == str(model.waiting_per_replica)


def test_should_run_the_gateway_pinned_on_its_database_with_the_rendered_config(
        rendered: dict[str, RenderedRelease]) -> None:
    site = parse(prod_values())
    gateway = rendered["llm-gateway"]
    (proxy,) = objects(gateway, "Deployment")
    (container,) = proxy["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/berriai/litellm-database:main-v1.80.5-stable.1"
    (config,) = objects(gateway, "ConfigMap")
    rendered_config = yaml.safe_load(config["data"]["config.yaml"])
    # Helm writes small floats as `1e-05`, which YAML 1.1 reads as a string; LiteLLM's pydantic params take it as
    # the float it is (tests/integration/test_gateway_live.py runs the proxy on this rendered config).
    for entry in rendered_config["model_list"]:
        params = entry["litellm_params"]
        for cost in ("input_cost_per_token", "output_cost_per_token"):
            params[cost] = float(params[cost])
    assert rendered_config == gateway_config(site)
    env = {e["name"]: e for e in container["env"]}
    (cluster,) = objects(rendered["llm-gateway-db"], "Cluster")
    assert cluster["spec"]["imageName"].startswith("ghcr.io/cloudnative-pg/postgresql:16.")
    assert env["DATABASE_HOST"]["value"] == f"{cluster['metadata']['name']}-rw"
    assert env["DATABASE_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == f"{cluster['metadata']['name']}-app"
    assert env["PROXY_MASTER_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "llm-gateway-master-key"
    assert {"secretRef": {"name": site.inference.gateway.provider_secret}} in container["envFrom"]
    assert not objects(gateway, "StatefulSet"), "the chart's bundled (withdrawn) Bitnami PostgreSQL must stay off"


def stop_waiting(release: str, *for_releases: str) -> Any:
    """The release no longer waits for the named releases, nor for anything they wait for."""
    def mutate(deployed: Deployed) -> Deployed:
        by_name = {i.urn.rsplit("::", 1)[-1]: i for i in deployed.installs}
        dropped = {u for r in for_releases for u in {by_name[r].urn} | by_name[r].waits_for}
        own = by_name[release]
        return dataclasses.replace(deployed, installs=tuple(
            dataclasses.replace(i, waits_for=i.waits_for - dropped) if i is own else i for i in deployed.installs))
    return mutate


def before_admission(release: str) -> Any:
    """The release no longer waits for the node checks' patches (the labels and taints of admission)."""
    def mutate(deployed: Deployed) -> Deployed:
        patches = {i.urn for i in deployed.installs if any(o["kind"] == "Node" for o in i.objects)}
        return dataclasses.replace(deployed, installs=tuple(
            dataclasses.replace(i, waits_for=i.waits_for - patches) if i.urn.endswith(f"::{release}") else i
            for i in deployed.installs))
    return mutate


def wait_s(release: str, seconds: int) -> Any:
    def mutate(deployed: Deployed) -> Deployed:
        return dataclasses.replace(deployed, installs=tuple(
            dataclasses.replace(i, wait_s=seconds) if i.urn.endswith(f"::{release}") else i for i in deployed.installs))
    return mutate


@pytest.mark.parametrize(("mutate", "violation"), [
    pytest.param(stop_waiting("prod-monitoring-prometheus", "prod-cold-tier-ceph-cluster"),
                 "Prometheus monitoring/kube-prometheus-stack-prometheus (from prod-monitoring-prometheus) "
                 "spec.storage.volumeClaimTemplate.spec.storageClassName: StorageClass ceph-cold comes from "
                 "prod-cold-tier-ceph-cluster, which it does not wait for",
                 id="should hold metrics volumes whose class is created after them"),
    pytest.param(wait_s("prod-inference-model-servers", 300),
                 "prod-inference-model-servers waits 300 s for its workloads, but Deployment "
                 "inference/vllm-qwen2-5-72b-deployment-vllm may take 615 s to start (container vllm startupProbe "
                 "15 + 60 x 10 s)", id="should hold a release that waits less than its pods' startup probe allows"),
    pytest.param(stop_waiting("prod-inference-model-servers", "prod-inference-keda"),
                 "ScaledObject inference/vllm-llama-3-1-8b-scaledobject (from prod-inference-model-servers): the CRD "
                 "of keda.sh ScaledObject comes from prod-inference-keda, which it does not wait for",
                 id="should hold a custom resource created before its CRD"),
    pytest.param(stop_waiting("prod-inference-gateway", "prod-inference-database"),
                 "Deployment inference/llm-gateway-litellm (from prod-inference-gateway) container litellm env "
                 "DATABASE_PASSWORD: Secret inference/llm-gateway-db-cluster-app comes from prod-inference-database, "
                 "which it does not wait for", id="should hold a pod created before the Secret it mounts"),
    pytest.param(stop_waiting("prod-storage-mover-0", "prod-storage-checkpoint-mover"),
                 "CronJob storage/checkpoint-mover-0 (from prod-storage-mover-0) volume mover: ConfigMap "
                 "storage/checkpoint-mover comes from prod-storage-checkpoint-mover, which it does not wait for",
                 id="should hold a pod created before the ConfigMap it mounts"),
    pytest.param(stop_waiting("prod-inference-gateway", "prod-inference-namespace"),
                 "Deployment inference/llm-gateway-litellm (from prod-inference-gateway): Namespace inference comes "
                 "from prod-inference-namespace, which it does not wait for",
                 id="should hold a release installed before its namespace"),
    pytest.param(before_admission("prod-inference-model-servers"),
                 "prod-inference-model-servers waits for Deployment inference/vllm-qwen2-5-72b-deployment-vllm, whose "
                 "pods need nodes labelled gpucluster.io/gpu-model, gpucluster.io/pool, gpucluster.io/validated, "
                 "before 16 of the 16 node patches that set them (gpu-4090-01-admission, gpu-4090-02-admission, "
                 "gpu-4090-03-admission, ...)",
                 id="should hold model servers that wait for pods no admitted node can take yet"),
])
def test_should_hold_a_first_install_that_cannot_converge(graph: ResourceGraph, rendered: dict[str, RenderedRelease],
                                                          mutate: Any, violation: str) -> None:
    found = broken(mutate(stack(graph, rendered)))
    assert set(found) == {"first-install-converges"}, found
    assert violation in found["first-install-converges"], "\n".join(found["first-install-converges"])


def test_should_not_judge_convergence_without_the_dependency_graph(graph: ResourceGraph,
                                                                   rendered: dict[str, RenderedRelease]) -> None:
    found = broken(dataclasses.replace(stack(graph, rendered), installs=()))
    assert found["first-install-converges"] == ["no dependency graph was given with the rendered objects: "
                                                "convergence cannot be judged"]


def pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods a rendered object makes: a workload's template, a CronJob's Job's, a CloudNativePG Cluster's
    instances (the operator's pods, which request the Cluster's spec.resources)."""
    spec = obj.get("spec") or {}
    if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return [spec["template"]]
    if obj["kind"] == "CronJob":
        return [spec["jobTemplate"]["spec"]["template"]]
    if obj["kind"] == "Cluster" and obj["apiVersion"].startswith("postgresql.cnpg.io/"):
        return [{"metadata": {"labels": {"cnpg.io/cluster": obj["metadata"]["name"]}},
                 "spec": {"containers": [{"name": "postgres", "resources": spec.get("resources") or {}}]}}]
    return []


def ksm_series(namespace: str, pod: str, template: dict[str, Any], allowed: frozenset[str]) -> list[dict[str, str]]:
    """What kube-state-metrics v2 exports for a Pending pod (docs/metrics/workload/pod-metrics.md): its phase, its
    allowlisted labels as label_<name> (sanitized to [a-zA-Z0-9_]), each container's requests with the resource name
    sanitized (nvidia.com/gpu: nvidia_com_gpu)."""
    at = f'namespace="{namespace}", pod="{pod}"'
    labels = {"label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k): v for k, v in
              ((template.get("metadata") or {}).get("labels") or {}).items()}
    shown = "".join(f', {k}="{v}"' for k, v in sorted(labels.items()) if k in allowed)
    series = [{"series": f'kube_pod_status_phase{{{at}, phase="{phase}"}}', "values": f"{int(phase == 'Pending')}x5"}
              for phase in ("Pending", "Running")]
    series.append({"series": f"kube_pod_labels{{{at}{shown}}}", "values": "1x5"})
    for container in template["spec"]["containers"]:
        for resource, amount in ((container.get("resources") or {}).get("requests") or {}).items():
            name = re.sub(r"[^a-zA-Z0-9_]", "_", resource)
            gpus = str(amount) if resource == "nvidia.com/gpu" else "1"
            series.append({"series": f'kube_pod_container_resource_requests{{{at}, container="{container["name"]}", '
                                     f'resource="{name}"}}', "values": f"{gpus}x5"})
    return series


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_should_count_as_pending_only_the_model_servers_that_request_gpus(
        graph: ResourceGraph, rendered: dict[str, RenderedRelease], tmp_path: Path) -> None:
    # Every pod of the rendered inference namespace Pending at once, as kube-state-metrics (with the rendered label
    # allowlist) reports it, and the lending controller's query run by promtool: only the engines count.
    deployed = stack(graph, rendered)
    (ksm,) = [p for p in producers(deployed) if p.name == "kube-state-metrics"]
    pods = {f"{obj['metadata']['name']}-{i}": template for obj in deployed.objects
            if (obj.get("metadata") or {}).get("namespace") == NAMESPACE
            for i, template in enumerate(pod_templates(obj))}
    engines = [pod for pod, template in pods.items() if any(
        "nvidia.com/gpu" in ((c.get("resources") or {}).get("requests") or {}) for c in template["spec"]["containers"])]
    assert sorted(engines) == ["vllm-llama-3-1-8b-deployment-vllm-0", "vllm-qwen2-5-72b-deployment-vllm-0"]
    # The gateway, its database and the database chart's test pod are Pending too.
    assert len(pods) > len(engines) + 2, sorted(pods)
    series = [s for pod, template in pods.items()
              for s in ksm_series(NAMESPACE, pod, template, ksm.labels_of["kube_pod_labels"])]
    (tmp_path / "test.yml").write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series, "promql_expr_test": [
            {"expr": DEMAND_QUERIES["pending_pods"], "eval_time": "2m",
             "exp_samples": [{"labels": "{}", "value": len(engines)}]},
            # The controller counts only the models that may add replicas on lent nodes: qwen on prod.
            {"expr": demand_queries(lent_models(parse(prod_values())))["pending_pods"], "eval_time": "2m",
             "exp_samples": [{"labels": "{}", "value": 1}]}]}]}))
    run = subprocess.run(["promtool", "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


CORE_INTEGRATIONS = {"batch/job": "Job", "pod": "Pod", "deployment": "Deployment", "statefulset": "StatefulSet"}
"""Kueue integrations of Kubernetes' own kinds (Kueue docs, "Run ... with Kueue"; Configuration
integrations.frameworks); every other is `<CRD group>/<kind, lower case>`."""


def test_should_enable_only_kueue_integrations_whose_kinds_the_cluster_has(
        graph: ResourceGraph, rendered: dict[str, RenderedRelease]) -> None:
    (config,) = objects(rendered["kueue"], "ConfigMap", "kueue-manager-config")
    frameworks = yaml.safe_load(config["data"]["controller_manager_config.yaml"])["integrations"]["frameworks"]
    crds = {f"{c['spec']['group']}/{c['spec']['names']['kind'].lower()}"
            for c in stack(graph, rendered).of_kind("CustomResourceDefinition")}
    assert frameworks and [f for f in frameworks if f not in CORE_INTEGRATIONS and f not in crds] == []


def test_should_name_only_objects_the_render_has_in_every_sop(graph: ResourceGraph,
                                                              rendered: dict[str, RenderedRelease]) -> None:
    site = parse(prod_values())
    deployed = stack(graph, rendered)
    found = list(commands(REPO / "docs" / "sop"))
    refs = [r for file, command in found for r in references(file, command)]
    bound = {"<model>": [m.name for m in site.inference.models], "<Hostname>": [n.name for g in site.node_groups
                                                                                for n in g.nodes]}
    nodes = bound["<Hostname>"]
    assert unresolved(refs, deployed.objects, bound, nodes) == []
    namespaces = {o["metadata"]["name"] for o in deployed.of_kind("Namespace")} | {
        (o.get("metadata") or {}).get("namespace") for o in deployed.objects}
    assert [f"{file}: `{command}`: no namespace {ns}" for file, command in found for ns in namespaces_of(command)
            if ns not in namespaces] == []
    # What it read: the SOPs name Deployments, Services, a CronJob and its Jobs, the Ceph cluster and nodes.
    assert {r.kind for r in refs} >= {"Deployment", "Endpoints", "CronJob", "Job", "CephCluster", "Node"}


def test_should_send_each_served_model_to_a_port_its_engine_service_has(rendered: dict[str, RenderedRelease]) -> None:
    ports = {s["metadata"]["name"]: {p["port"] for p in s["spec"]["ports"]}
             for s in objects(rendered["vllm"], "Service")}
    (config,) = objects(rendered["llm-gateway"], "ConfigMap")
    served = [e["litellm_params"]["api_base"] for e in yaml.safe_load(config["data"]["config.yaml"])["model_list"]
              if e["litellm_params"]["model"].startswith("hosted_vllm/")]
    assert len(served) == len(parse(prod_values()).inference.models)
    for api_base in served:
        url = urlsplit(api_base)
        service, namespace = str(url.hostname).split(".")[:2]
        assert namespace == NAMESPACE and url.port in ports[service], (api_base, ports)


def test_should_give_every_pod_of_the_gateway_and_its_database_guaranteed_resources_above_the_lowest_class(
        graph: ResourceGraph, rendered: dict[str, RenderedRelease]) -> None:
    site = parse(prod_values())
    # The class each object's pods get once the stack's patches of the rendered objects apply.
    patched = {(p.inputs["metadata"]["name"], p.inputs["metadata"]["namespace"]):
               p.inputs["spec"]["template"]["spec"]["priorityClassName"]
               for p in graph.of_type("kubernetes:apps/v1:DeploymentPatch")}
    classes = {c["metadata"]["name"]: c["value"] for c in stack(graph, rendered).of_kind("PriorityClass")}
    pods = {}
    for release in ("llm-gateway", "llm-gateway-db"):
        for obj in rendered[release].objects:
            if obj["kind"] == "Pod" or "helm.sh/hook" in (obj["metadata"].get("annotations") or {}):
                continue  # the database chart's `helm test` pod: run by hand, never by the install
            for template in pod_templates(obj):
                given = template["spec"].get("priorityClassName") or obj["spec"].get("priorityClassName")
                key = (obj["metadata"]["name"], obj["metadata"].get("namespace"))
                pods[f"{obj['kind']} {key[0]}"] = (given or patched.get(key), template["spec"]["containers"])
    # The proxy and the database's instances, and no schema migration Job (the chart's takes no class; the proxy
    # migrates at start).
    assert sorted(pods) == ["Cluster llm-gateway-db-cluster", "Deployment llm-gateway-litellm"], sorted(pods)
    for pod, (class_name, containers) in pods.items():
        assert class_name in classes and classes[class_name] > min(classes.values()), (pod, class_name)
        for resources in (c.get("resources") for c in containers):
            assert resources and resources["requests"] == resources["limits"] and set(resources["limits"]) == {
                "cpu", "memory"}, (pod, resources)
    (cluster,) = objects(rendered["llm-gateway-db"], "Cluster")
    # CloudNativePG spreads the instances on this node label: one every node carries, the kubelet's own.
    assert cluster["spec"]["affinity"]["topologyKey"] == "kubernetes.io/hostname"
    assert site.inference.gateway.database.instances > 1


def edit_alertmanager_config(edit: Any) -> Any:
    """Edits the Alertmanager config in the Secret kube-prometheus-stack renders, as the operator would read it."""
    def mutate(deployed: Deployed) -> Deployed:
        secret = find(deployed, "Secret", "alertmanager-kube-prometheus-stack-alertmanager")
        config = yaml.safe_load(base64.b64decode(secret["data"]["alertmanager.yaml"]))
        edit(config)
        secret["data"]["alertmanager.yaml"] = base64.b64encode(yaml.safe_dump(config).encode()).decode()
        return deployed
    return mutate


def receiver_url(name: str, url: str) -> Any:
    def edit(config: dict[str, Any]) -> None:
        (receiver,) = [r for r in config["receivers"] if r["name"] == name]
        receiver["webhook_configs"][0]["url"] = url
    return edit


def page_no_one(config: dict[str, Any]) -> None:
    for route in config["route"]["routes"]:
        if 'severity="critical"' in route.get("matchers", []):
            route["receiver"] = "null"


@pytest.mark.parametrize(("mutate", "violation"), [
    pytest.param(edit_alertmanager_config(receiver_url("heartbeat", "https://heartbeat.example.internal/gpu-cluster")),
                 "Alertmanager monitoring/kube-prometheus-stack-alertmanager receiver heartbeat: webhook_configs url "
                 "https://heartbeat.example.internal/gpu-cluster is a placeholder: heartbeat.example.internal is under "
                 "example.internal, a name for examples (RFC 2606): name the site's own host",
                 id="should hold a heartbeat sent to a placeholder host"),
    pytest.param(edit_alertmanager_config(page_no_one),
                 "Alertmanager monitoring/kube-prometheus-stack-alertmanager: route to null (severity=\"critical\") "
                 "goes to receiver null, which delivers to no one", id="should hold critical alerts routed to no one"),
])
def test_should_hold_alerts_that_reach_no_human(graph: ResourceGraph, rendered: dict[str, RenderedRelease],
                                                mutate: Any, violation: str) -> None:
    found = broken(mutate(stack(graph, rendered)))
    assert set(found) == {"alerts-reach-a-human"}, found
    assert violation in found["alerts-reach-a-human"], "\n".join(found["alerts-reach-a-human"])


def test_should_hold_an_on_call_receiver_that_nothing_deploys(graph: ResourceGraph,
                                                              rendered: dict[str, RenderedRelease]) -> None:
    # The bridge the prod site used to page through: an in-cluster name no release or object of the stack serves.
    bridge = "http://oncall-bridge.monitoring.svc:8080/alertmanager"
    found = broken(edit_alertmanager_config(receiver_url("oncall", bridge))(stack(graph, rendered)))
    assert (f"Alertmanager monitoring/kube-prometheus-stack-alertmanager receiver oncall: webhook_configs url {bridge} "
            "names no Service the stack deploys") in found["alerts-reach-a-human"]


def test_should_exit_3_naming_each_broken_invariant(rendered: dict[str, RenderedRelease], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The plan as `make plan` runs it, with what Helm rendered broken two ways: a heartbeat to a placeholder host
    # (past the spec's check, as a chart default could put it there) and a model server whose startup probe allows
    # more than its release waits.
    releases = copy.deepcopy(list(rendered.values()))
    by_name = {r.release: r for r in releases}
    (secret,) = [o for o in by_name["kube-prometheus-stack"].objects if o["kind"] == "Secret"
                 and o["metadata"]["name"] == "alertmanager-kube-prometheus-stack-alertmanager"]
    config = base64.b64decode(secret["data"]["alertmanager.yaml"]).decode()
    heartbeat = parse(prod_values()).alerting.heartbeat_url
    secret["data"]["alertmanager.yaml"] = base64.b64encode(
        config.replace(heartbeat, "https://heartbeat.example.internal/gpu-cluster").encode()).decode()
    for engine in [o for o in by_name["vllm"].objects if o["kind"] == "Deployment"]:
        engine["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["failureThreshold"] = 200
    monkeypatch.setattr("runbooks.plan.helm.render_releases", lambda *_: releases)
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(REPO), "--out", str(tmp_path / "plan"),
                                      "--chart-mirror", str(MIRROR)])
    assert result.exit_code == 3, result.output
    said = " ".join(result.output.split())  # the console wraps long lines
    assert "2 broken invariant(s): alerts-reach-a-human, first-install-converges" in said
    assert re.search(r"alerts-reach-a-human: \S+ \S+ receiver heartbeat: webhook_configs url "
                     r"https://heartbeat\.example\.internal/gpu-cluster is a placeholder", said)
    assert re.search(r"first-install-converges: prod-inference-model-servers waits 915 s for its workloads, but "
                     r"Deployment inference/\S+ may take 2015 s to start", said)


def test_should_give_the_gateways_pods_the_inference_class_by_a_patch_of_the_rendered_deployment(
        graph: ResourceGraph, rendered: dict[str, RenderedRelease]) -> None:
    (proxy,) = objects(rendered["llm-gateway"], "Deployment")
    # litellm-helm 0.4.8 has no value for it: the chart renders none, whatever the values say.
    assert "priorityClassName" not in proxy["spec"]["template"]["spec"]
    (patch,) = graph.of_type("kubernetes:apps/v1:DeploymentPatch")
    assert patch.inputs["metadata"] == {"name": proxy["metadata"]["name"], "namespace": proxy["metadata"]["namespace"]}
    classes = {c["metadata"]["name"]: c["value"] for c in stack(graph, rendered).of_kind("PriorityClass")}
    assert classes[patch.inputs["spec"]["template"]["spec"]["priorityClassName"]] > min(classes.values())
    # Applied once the release has made the Deployment.
    (release,) = [r for r in graph.of_type(RELEASE_TYPE) if r.inputs["name"] == "llm-gateway"]
    assert release.urn in patch.dependencies


def test_should_exit_3_naming_references_resolve_when_the_gateway_sends_a_model_to_a_port_its_service_lacks(
        rendered: dict[str, RenderedRelease], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `make plan` as it ran before issue 35: the gateway asked the engines at the container's port 8000.
    releases = copy.deepcopy(list(rendered.values()))
    (configmap,) = [o for r in releases if r.release == "llm-gateway" for o in r.objects if o["kind"] == "ConfigMap"]
    configmap["data"]["config.yaml"] = configmap["data"]["config.yaml"].replace(".svc:80/", ".svc:8000/")
    monkeypatch.setattr("runbooks.plan.helm.render_releases", lambda *_: releases)
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(REPO), "--out", str(tmp_path / "plan"),
                                      "--chart-mirror", str(MIRROR)])
    assert result.exit_code == 3, result.output
    said = " ".join(result.output.split())  # the console wraps long lines
    assert "1 broken invariant(s): references-resolve" in said
    assert ("references-resolve: ConfigMap inference/llm-gateway-litellm-config data.config.yaml: "
            "vllm-llama-3-1-8b-engine-service.inference.svc:8000 names port 8000, which Service "
            "inference/vllm-llama-3-1-8b-engine-service does not have (it has 80, 9999, 55555)") in said
