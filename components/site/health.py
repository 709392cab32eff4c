"""The health section of the site spec (`gpu-cluster:health`): when the node health controller drains a GPU node,
diagnoses it and returns it, or hands it to a human (components/scheduling/health_decision.py decides;
runbooks/health/controller.py acts; docs/health.md).

Signals are the DCGM series the stack already scrapes (components/gpu_operator/dcgm_counters.py): the last XID, the
double-bit ECC and NVLink error counters, row remap failure and pending, thermal violation time and the GPUs a node
reports. Each threshold names its source.
"""

from typing import Annotated

from pydantic import AfterValidator, Field, field_validator

from components.site import defaults
from components.site.maintenance_window import parse_window
from components.site.types import AbsolutePath, Float, Int, KubernetesUser, ListenAddress, Percent, Spec
from components.site.wellknown import PROMETHEUS_URL
from components.site.xid import XID_CATALOGUE, unknown_xids

# Seconds compared with time.time() differences and written as Prometheus ranges `[<s>s]`: a day at most.
Seconds = Annotated[Int, Field(gt=0, le=86_400)]


def maintenance_window(text: str) -> str:
    """A pydantic validator: the text is a window components.site.maintenance_window reads, or the error says why."""
    parse_window(text)
    return text


def known_xids(xids: tuple[int, ...]) -> tuple[int, ...]:
    """A pydantic validator: every XID of a field is in the catalogue, or the error names those that are not."""
    unknown = unknown_xids(xids)
    if unknown:
        raise ValueError(f"XID {', '.join(map(str, unknown))} is not in NVIDIA's Xid catalogue as this project "
                         f"knows it (components/site/xid.py: {', '.join(map(str, sorted(XID_CATALOGUE)))})")
    return xids


class Health(Spec):
    drain_xids: Annotated[tuple[Annotated[Int, Field(gt=0, le=999)], ...], Field(min_length=1)] = (
        defaults.HEALTH_DRAIN_XIDS)
    """XIDs (DCGM_FI_DEV_XID_ERRORS, the last one a GPU logged) that make its node suspect when logged within
    window_s; each must be in components.site.xid.XID_CATALOGUE (NVIDIA's Xid catalogue,
    docs.nvidia.com/deploy/xid-errors). Default: the catalogue's XIDs whose resolution is a GPU reset, a reboot or a
    hardware check."""
    ecc_dbe_max: Annotated[Int, Field(ge=0, le=1_000_000)] = defaults.HEALTH_ECC_DBE_MAX
    """Double-bit ECC errors (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL) a GPU may add within window_s; one more makes the node
    suspect. Default 0 (DCGM's health watch fails a GPU on any DBE)."""
    nvlink_errors_max: Annotated[Int, Field(ge=0, le=1_000_000_000)] = defaults.HEALTH_NVLINK_ERRORS_MAX
    """NVLink CRC flit, CRC data, replay and recovery errors (DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL, added up) a
    GPU may add within window_s; more makes the node suspect."""
    thermal_violation_pct: Percent = defaults.HEALTH_THERMAL_VIOLATION_PCT
    """% of window_s a GPU may spend clocked down for heat (DCGM_FI_DEV_THERMAL_VIOLATION, in us); more makes the
    node suspect. A row remap failure or a pending row remap (DCGM_FI_DEV_ROW_REMAP_FAILURE, _PENDING) always does,
    as does a node reporting fewer GPUs than its group has."""
    window_s: Seconds = defaults.HEALTH_WINDOW_S
    """s over which counters are read (Prometheus increase() and rate() ranges) and an XID counts as recent."""
    # Compared with time.time() differences by decide(); a week at most.
    requeue_after_s: Annotated[Int, Field(gt=0, le=7 * 86_400)] | None = None
    """s a suspect node's Slurm jobs may run on before the controller requeues those Slurm can requeue (batch jobs
    not submitted with --no-requeue, not part of a heterogeneous job, not stopped by a lend); the others still finish.
    None (the default): every job finishes, however long: a requeue loses the work since the job's last checkpoint,
    and a fault that has not failed a job may never."""
    diag_level: Annotated[Int, Field(ge=1, le=4)] = defaults.HEALTH_DIAG_LEVEL
    """`dcgmi diag -r` suite a drained node must pass before it returns (1 quick, 2 medium ~2 min, 3 long ~15 min,
    4 extended: dcgmi diag reference, docs.nvidia.com/datacenter/dcgm). It runs once the node is idle in both
    schedulers, for at most node_check.diag_timeout_s."""
    diag_windows: Annotated[tuple[Annotated[str, Field(max_length=100), AfterValidator(maintenance_window)], ...],
                            Field(max_length=50)] = ()
    """When a diagnosis may start: maintenance windows `DAYS HH:MM-HH:MM` in UTC (`Sat,Sun 00:00-24:00`,
    `Mon-Fri 22:00-06:00`; components/site/maintenance_window.py). Empty (the default): whenever the node is idle in
    both schedulers. A drained node waits for the next window (holding its share of the drain budget); a diagnosis
    started in a window runs to its end, however late."""
    max_drained_pct: Annotated[Float, Field(ge=0, le=100)] = defaults.HEALTH_MAX_DRAINED_PCT
    """% of the site's GPU nodes the controller may hold drained at once, rounded down (nodes it drained, is
    diagnosing or handed to a human); a suspect node past it waits, and HealthDrainBudgetExhausted says so. 0: the
    controller never drains."""
    failures_before_handoff: Annotated[Int, Field(ge=1, le=100)] = defaults.HEALTH_FAILURES_BEFORE_HANDOFF
    """Failures within failure_window_h (a failed or timed-out diagnosis, or the node turning suspect again after
    the controller returned it) that hand the node to a human: it stays drained with the SOP
    docs/sop/node-handed-to-a-human.md until someone resumes it."""
    failure_window_h: Annotated[Int, Field(ge=1, le=8760)] = defaults.HEALTH_FAILURE_WINDOW_H
    """hours a failure counts toward failures_before_handoff."""
    stale_after_s: Seconds = defaults.HEALTH_STALE_AFTER_S
    """s after which a node's newest DCGM sample is too old: the controller judges that node on nothing and leaves
    it as it is; when no node has fresh samples, or Prometheus, Slurm or kubectl cannot be read, it pauses whole."""
    interval_s: Seconds = defaults.HEALTH_INTERVAL_S
    """s between two decisions; also Prometheus's scrape interval of the controller."""
    metrics_port: Annotated[Int, Field(gt=0, lt=65536)] = defaults.HEALTH_METRICS_PORT
    """TCP port of the controller's /metrics on the Slurm controller; Prometheus scrapes it."""
    metrics_address: ListenAddress = "127.0.0.1"
    """The address /metrics binds to on the Slurm controller (one interface; as lending.metrics_address)."""
    prometheus_url: Annotated[str, Field(pattern=r"^https?://\S+[^/]$")] = PROMETHEUS_URL
    """Prometheus the controller reads the DCGM series from, as the Slurm controller reaches it."""
    kubeconfig: AbsolutePath = "/etc/gpucluster/health-controller.kubeconfig"
    """kubectl's credentials on the Slurm controller: an identity that may read nodes and pods and cordon, uncordon
    and annotate every GPU node (the platform team provides it; never in the stack file). It authenticates as
    kubernetes_user."""
    kubernetes_user: KubernetesUser = "gpucluster-health-controller"
    """The Kubernetes user kubeconfig authenticates as. The stack binds it to what the controller's kubectl calls do,
    no more (components/scheduling/controller_access.py): list of nodes and of pods, get and patch of the site's GPU
    nodes (cordon, uncordon, annotate)."""
    ssh_key: AbsolutePath = "/etc/gpucluster/health-controller.ssh-key"
    """Private key (root-only file) the controller logs in to a drained node with as ssh_user to run `dcgmi diag` in
    the GPU Operator's DCGM container (the platform team provides it)."""
    state_dir: AbsolutePath = "/var/lib/gpucluster/health"
    """Where the controller keeps its lock, its memory of each node, the diagnoses' output and its audit log."""

    _known_xids = field_validator("drain_xids")(known_xids)
