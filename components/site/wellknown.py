"""Well-known names: the labels, taints, type tokens and host paths that more than one part of the system reads.

The program writes them, the runbooks and host scripts act on them, and the policy pack keys on them: one
definition here, which the pack mirrors under a contract test (tests/policy/test_contract.py), since the pack
imports nothing from the program.
"""

from hosts.checkpoint_mover import LOCK_DIR, LOCK_FILE

# Labels, annotations and taints on Kubernetes nodes and namespaces.
LABEL_PREFIX = "gpucluster.io"
VALIDATED_LABEL = f"{LABEL_PREFIX}/validated"
"""A node that passed its node check; the only nodes GPU work is scheduled on."""
REASON_ANNOTATION = f"{LABEL_PREFIX}/validation-reason"
UNVALIDATED_TAINT = f"{LABEL_PREFIX}/unvalidated"
POOL_TAINT = f"{LABEL_PREFIX}/pool"
GPU_MODEL_LABEL = f"{LABEL_PREFIX}/gpu-model"
RACK_LABEL = f"{LABEL_PREFIX}/rack"
POOL_LABEL = f"{LABEL_PREFIX}/pool"
FLEX_LENT_LABEL = f"{LABEL_PREFIX}/flex-lent"
"""Set to "true" by `gpuctl flex lend` on a flex node lent to Kubernetes inference (runbooks/flex/lending.py)."""
HEALTH_ANNOTATION = f"{LABEL_PREFIX}/health"
"""On a node the health controller cordoned (runbooks/health): `suspect` or `handed`, the phase it holds it in."""
HOLD_LABEL = f"{LABEL_PREFIX}/hold"
"""Set by whoever holds a node for their own work (a drill, an operator), its value naming them: the health
controller never touches a node carrying it."""
TEAM_LABEL = f"{LABEL_PREFIX}/team"
"""Marks a team's namespace and queue; the policy pack's serving-after-monitoring and team rules key on it."""

PLATFORM_ACCOUNT = "platform"
"""The operators' own account, on Slurm and on the LLM gateway, which exists at every stage (the first onboards no
team): the acceptance campaign's training jobs and inference requests run under it (runbooks/acceptance)."""

INFERENCE_NAMESPACE = "inference"
"""The model servers and the gateway (components/inference); the one namespace whose GPU pods may use lent flex nodes
(components/scheduling/pools.py)."""
MONITORING_NAMESPACE = "monitoring"
"""Prometheus, Alertmanager, Grafana and their rules and dashboards (components/monitoring)."""
KUEUE_NAMESPACE = "kueue-system"
STORAGE_NAMESPACE = "storage"
"""The NFS CSI driver and the checkpoint mover's CronJob (components/storage)."""
CEPH_NAMESPACE = "rook-ceph"
KEDA_NAMESPACE = "keda"
DATABASE_OPERATOR_NAMESPACE = "cnpg-system"
"""The platform's own namespaces above: a team's namespace may take none of them (components/validate.py)."""

PROMETHEUS_URL = f"http://prometheus-operated.{MONITORING_NAMESPACE}.svc:9090"
"""The hot Prometheus inside the cluster: the Prometheus Operator's governing Service of its Prometheus pods."""

# Labels on pods.
ENGINE_COMPONENT_LABEL = "app.kubernetes.io/component"
ENGINE_COMPONENT = "serving-engine"
"""How vllm-stack labels every model server's pod (`chart.engineStandardLabels`, vllm-stack 0.1.12 _helpers.tpl): the
lending controller counts pending pods by it, and kube-state-metrics is told to export it."""

# Component type tokens, gpucluster:<concern>:<Noun>.
CLUSTER_TYPE = "gpucluster:cluster:GpuCluster"
FACILITY_TYPE = "gpucluster:facility:Facility"
RACK_TYPE = "gpucluster:facility:Rack"
GPU_NODE_TYPE = "gpucluster:facility:GpuNode"
GPU_OPERATOR_TYPE = "gpucluster:gpu_operator:GpuOperator"
INFERENCE_TYPE = "gpucluster:inference:InferencePath"
MONITORING_TYPE = "gpucluster:monitoring:Stack"
SCHEDULING_TYPE = "gpucluster:scheduling:Scheduling"
SLURM_TYPE = "gpucluster:slurm:Slurm"
STORAGE_TYPE = "gpucluster:storage:Tiers"
COLD_TIER_TYPE = "gpucluster:storage:ColdTier"
TEAM_TYPE = "gpucluster:teams:Team"

# Paths and names on the hosts.
DRIVER_ROOT = "/run/nvidia/driver"
"""The GPU Operator's driver root: the driver container's filesystem on the host, with the driver's libraries, tools
and its own C library (gpu-operator chart value hostPaths.driverInstallDir, v25.10.1 values.yaml). Host programs
reach it with chroot or a toolkit pointed at it, never through the host's PATH or linker."""
TOOLKIT_DIR = "/usr/local/nvidia"
"""Where the GPU Operator installs the NVIDIA container toolkit on the host (chart value toolkit.installDir); its
installer puts nvidia-container-cli, a wrapper that sets its own library path, in <dir>/toolkit."""
TOOLKIT_CLI = f"{TOOLKIT_DIR}/toolkit/nvidia-container-cli"
DCGM_CONTAINER = "nvidia-dcgm-ctr"
"""The container of the GPU Operator's standalone DCGM (DaemonSet nvidia-dcgm, gpu-operator
assets/state-dcgm/0400_dcgm.yml): nv-hostengine, dcgmi and the diagnostic plugins."""
CRI_ENDPOINT = "unix:///run/containerd/containerd.sock"
"""containerd's CRI socket on every node, which crictl talks to (the GPU Operator's toolkit configures containerd)."""
HPC_JOB_MAPPING_DIR = "/var/run/dcgm-hpc-jobs"
"""Slurm's prolog writes one file per GPU index holding the job id; the DCGM exporter adds it as `hpc_job`."""
MOVER_LOCK = f"{LOCK_DIR}/{LOCK_FILE}"
"""The lock the checkpoint mover takes in each hot export root, in a folder only root may enter (the mover owns both
names): one mover per NFS server at a time, cluster-wide (flock reaches the server on NFSv4). The mover skips names
starting with '.'."""
TEXTFILE_DIR = "/var/lib/node_exporter/textfile_collector"
"""Where the checkpoint mover writes its metrics on a node and node-exporter's textfile collector reads them."""
PREFETCHED_MARKER = ".prefetched"
"""Written into a model's directory on a node's NVMe cache once the prefetch copied it whole; model servers start
only when it is there, so a first load never reads the network (components/storage/tiers.py, components/inference)."""
COLD_CLASS = "ceph-cold"
"""The cold tier's StorageClass (CephFS, three replicas): the checkpoint archive, and the metrics tiers' volumes."""
COLD_FILESYSTEM = "ckpt-cold"
"""The CephFS filesystem of the cold tier, as Rook creates it and the Slurm nodes mount it."""
