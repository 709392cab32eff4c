"""The site spec: the one description of the site that every component reads.

Pure data (pydantic v2, frozen, unknown keys rejected). Field names are the keys of the stack file
(`Pulumi.<stack>.yaml`, namespace `gpu-cluster:`), so an error path such as
`racks[2].cooling.capacity_kw` points straight at the line to fix. Defaults live in
`components.site.defaults`; rules that span fields live in `components.site.rules` (the spec alone)
and `components.validate` (with the planners).
"""

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator

from components.site import defaults
from components.site.acceptance import Acceptance
from components.site.catalog import GPU_CATALOG, GpuClass
from components.site.endpoints import REAL_HOST, SiteUrl
from components.site.health import Health, known_xids
from components.site.inference import Inference
from components.site.lending import Lending
from components.site.mirror import Mirror
from components.site.types import (
    AbsolutePath,
    Float,
    Hostname,
    Int,
    LabelValue,
    ListenAddress,
    ModelPath,
    Name,
    Percent,
    Spec,
)
from components.site.wellknown import HPC_JOB_MAPPING_DIR, PROMETHEUS_URL

# Written as a Kubernetes quantity with :g (`<n>Ti`), which turns to `1e+06` from a million and `1e-05` under 1e-4,
# neither a quantity; 100 PiB is past any site.
Capacity = Annotated[Float, Field(ge=0.001, le=100_000)]
# Alert thresholds in PromQL and the node check's --max-temp-c; GPUs shut down by ~105 C (nvidia-smi -q).
Temperature = Annotated[Float, Field(gt=0, le=125)]
# A Kueue quota (nominalQuota, borrowingLimit); team-quotas holds it to its flavor's GPUs.
GpuCount = Annotated[Int, Field(ge=0, le=100_000)]
# A TCP port in slurm.conf, slurmdbd.conf and the exporter's unit.
Port = Annotated[Int, Field(gt=0, lt=65536)]
# A job's priority is the weights times factors (0..1) added up, a 32-bit number: two weights under 2^31 never overflow.
PriorityWeight = Annotated[Int, Field(ge=0, lt=1 << 31)]


class GpuModel(Spec):
    # The rack plan and the node check's nvidia-smi power limit; no GPU board draws 2 kW (B200: 1000 W).
    tdp_w: Annotated[Float, Field(gt=0, le=2000)]
    """W; the board power limit the GPU may draw at full load."""
    memory_gb: Annotated[Int, Field(gt=0, le=1024)]
    """GB of device memory."""
    gpu_class: GpuClass
    """How the GPU must be housed (dense GPUs need >= 40 kW liquid or in-row cooled racks)."""
    source: Annotated[str, Field(min_length=1)]
    """Where the figures come from (datasheet and year)."""
    smi_name: Annotated[str, Field(min_length=1)]
    """The name `nvidia-smi --query-gpu=name` prints; the node check compares against it."""
    # The node check's --expect-nvlinks; an H100 has 18, the most of any GPU (NVLink 4, 900 GB/s).
    nvlinks: Annotated[Int, Field(ge=0, le=18)]
    """NVLinks each GPU has up on a healthy node (0: the board has none); a node with fewer fails its check."""


class CoolingType(StrEnum):
    AIR = "air"
    REAR_DOOR = "rear_door"
    IN_ROW_CHILLED_WATER = "in_row_chilled_water"
    DIRECT_LIQUID = "direct_liquid"
    IMMERSION = "immersion"


class Cooling(Spec):
    type: CoolingType
    """How heat leaves the rack."""
    # Compared with the rack plan's heat load; the densest immersion racks remove ~200 kW.
    capacity_kw: Annotated[Float, Field(gt=0, le=500)]
    """kW of heat the rack's cooling removes (from the cooling design, not the nameplate of the room)."""


class Feed(StrEnum):
    A = "A"
    B = "B"


class Pdu(Spec):
    name: Name
    feed: Feed
    """Which of the two independent power paths feeds this PDU."""
    # The feed capacity the rack plan computes; low-voltage supplies end at 1000 V AC (IEC 60038).
    voltage_v: Annotated[Float, Field(gt=0, le=1000)]
    """V; line-to-line for three-phase, line-to-neutral for single-phase."""
    # The largest IEC 60309 industrial socket is 125 A (the rack plan checks the site's 32 and 63 A ratings).
    current_a: Annotated[Int, Field(gt=0, le=125)]
    """A; the socket and breaker rating (32 or 63)."""
    phases: Annotated[Int, Field(ge=1, le=3)]
    """1 or 3."""


class Room(Spec):
    name: Name
    description: str = ""


class Rack(Spec):
    name: Name
    room: Name
    """The room the rack stands in (rooms[].name)."""
    # Compared with the rack plan's draw, like cooling.capacity_kw.
    power_budget_kw: Annotated[Float, Field(gt=0, le=500)]
    """kW the facility provisions for this rack."""
    headroom_pct: Percent = defaults.POWER_HEADROOM_PCT
    """% of the power budget kept free; planned IT load must stay within the rest."""
    cooling: Cooling
    pdus: list[Pdu]
    """The rack's PDUs; at least one on each feed (A and B)."""


class Node(Spec):
    name: Name
    rack: Name
    """The rack the node stands in (racks[].name)."""
    ssh_host: Hostname
    """Address the node is reached at over SSH for validation and Slurm."""
    bmc_host: Hostname
    """Address of the node's BMC (IPMI) for PSU and power readings."""
    slurmd_port: Port | None = None
    """TCP port of this node's slurmd (slurm.conf(5) NodeName Port=) when it is not slurm.slurmd_port: where several
    Slurm nodes share one ssh_host (Slurm's multiple-slurmd mode, an emulated cluster), each needs its own."""


class Pool(StrEnum):
    KUBERNETES = "kubernetes"
    """Online inference, short and elastic jobs."""
    SLURM = "slurm"
    """Long, offline and preemptible training."""
    FLEX = "flex"
    """Slurm by default; lendable to Kubernetes at an inference peak."""


SLURM_POOLS = (Pool.SLURM, Pool.FLEX)
"""Pools whose nodes Slurm schedules; kubernetes-pool nodes are not in slurm.conf at all."""
KUBERNETES_POOLS = (Pool.KUBERNETES, Pool.FLEX)
"""Pools whose nodes Kubernetes may schedule GPU work on; the slurm pool is Slurm's alone."""


class NodeGroup(Spec):
    name: Name
    gpu_model: LabelValue
    """A key of gpu_catalog."""
    gpus_per_node: Annotated[Int, Field(gt=0, le=16)]
    platform_w: Annotated[Float, Field(gt=0, le=10_000)] | None = None
    """W a node draws apart from its GPUs; default by GPU class (components.site.defaults.PLATFORM_W)."""
    psu_efficiency: Annotated[Float, Field(gt=0, le=1)] = defaults.PSU_EFFICIENCY
    """Fraction of wall power the node's PSUs deliver as DC."""
    # Slurm's CPUs= (at most 65533, slurm.conf(5)) and the Kueue flavor's cpu quota.
    cpus: Annotated[Int, Field(gt=0, le=65533)]
    """CPU cores per node (Slurm CPUs=)."""
    # Slurm's RealMemory= in MiB and the Kueue flavor's memory quota; 64 TiB is past any single node.
    memory_gib: Annotated[Int, Field(gt=0, le=65536)]
    """GiB of host memory per node (Slurm RealMemory=)."""
    pool: Pool
    nodes: Annotated[list[Node], Field(min_length=1)]


class NvmeTier(Spec):
    # The prefetch compares it in KiB in shell arithmetic (64-bit); 1 PiB of NVMe is past any node.
    cache_gib: Annotated[Int, Field(gt=0, le=1 << 20)]
    """GiB of local NVMe per GPU node for model weights and LoRA adapters."""
    disks_path: AbsolutePath = defaults.NVME_DISKS_PATH
    """Where each node mounts its NVMe filesystems, one directory per disk (the local volume provisioner's
    discovery directory)."""
    cache_path: AbsolutePath = defaults.NVME_CACHE_PATH
    """Directory on NVMe holding the weights/LoRA cache that inference pods mount read-only."""
    prefetch: list[ModelPath] = []
    """Model directories, relative to nfs_hot.models_export, copied to every GPU node before first use."""


class NfsHotTier(Spec):
    servers: Annotated[list[Hostname], Field(min_length=1)]
    """NFS servers for the hot tier; teams are spread over them, never one for everything."""
    capacity_tib: Capacity
    """TiB of hot-tier capacity in all."""
    # The mover's --keep; a thousand checkpoints per run is past any hot tier.
    keep_checkpoints: Annotated[Int, Field(gt=0, le=1000)] = defaults.HOT_CHECKPOINT_KEEP
    """Newest checkpoints per run directory kept on the hot tier."""
    # A day at most: a job that checkpoints less often than daily is not one lending or preemption can plan around.
    checkpoint_interval_minutes: Annotated[Int, Field(gt=0, le=1440)] = defaults.CHECKPOINT_INTERVAL_MINUTES
    """minutes of run time between a training job's checkpoints to the hot tier, as the site asks of its teams: a
    requeued job loses at most this much work. The lending decision and `gpuctl simulate` charge a requeue with it."""
    export_root: AbsolutePath = defaults.NFS_EXPORT_ROOT
    """Each team's share is <export_root>/<team> on the server it is assigned to."""
    models_export: AbsolutePath = defaults.NFS_MODELS_EXPORT
    """The model registry on the first server, the source of the NVMe prefetch."""
    fill_alert_pct: Percent = defaults.HOT_FILL_ALERT_PCT
    """% full at which a hot-tier server raises a warning (the mover frees space every run)."""
    # An NFS timeout (timeo, 60 s by default) is past any latency worth a warning.
    write_latency_alert_ms: Annotated[Int, Field(gt=0, le=60_000)] = defaults.HOT_WRITE_LATENCY_ALERT_MS
    """ms the hot tier's NFS WRITEs may take on average, as a node's NFS client measures them, before StorageJitter
    warns (docs/sop/storage-jitter.md)."""
    mount_root: AbsolutePath = defaults.NFS_MOUNT_ROOT
    """Where hosts mount the hot tier: each server's export_root at <mount_root>/<server>, so a team's share is
    <mount_root>/<server>/<team> on every Slurm node (and on pods that mount the same way)."""

    @property
    def checkpoint_interval_s(self) -> float:
        """checkpoint_interval_minutes in seconds, as the lending decision and the simulator count run time."""
        return 60.0 * self.checkpoint_interval_minutes


class CephColdTier(Spec):
    capacity_tib: Capacity
    """TiB of cold-tier (Ceph) capacity."""
    # The mover's --archive-after-days, a timedelta from now; as long as the cold tier may keep anything.
    archive_after_days: Annotated[Int, Field(gt=0, le=36500)] = defaults.COLD_ARCHIVE_AFTER_DAYS
    """days after which a checkpoint moves from hot to cold."""
    mover_schedule: Annotated[str, Field(pattern=r"^\S+ \S+ \S+ \S+ \S+$")] = defaults.MOVER_SCHEDULE
    """Cron schedule of the checkpoint mover (five fields)."""
    mount_path: AbsolutePath = defaults.CEPH_MOUNT_PATH
    """Where hosts mount the CephFS cold filesystem's root; a team's archive is <mount_path>/<team>."""
    # The mover's --max-checkpoint-gib and --max-run-gib; 1 PiB at most.
    max_checkpoint_gib: Annotated[Int, Field(gt=0, le=1 << 20)] = defaults.MOVER_MAX_CHECKPOINT_GIB
    """GiB (apparent size) above which the mover refuses a checkpoint and leaves it on hot."""
    max_run_gib: Annotated[Int, Field(gt=0, le=1 << 20)] = defaults.MOVER_MAX_RUN_GIB
    """GiB one mover run may copy; the rest waits for the next run."""
    mover_deadline_minutes: Annotated[Int, Field(gt=0, le=1440)] = defaults.MOVER_DEADLINE_MINUTES
    """minutes after which a mover run starts no further checkpoint; it is stopped 10 minutes later."""


class Storage(Spec):
    nvme: NvmeTier
    nfs_hot: NfsHotTier
    ceph_cold: CephColdTier


class Monitoring(Spec):
    hot_retention_days: Annotated[Int, Field(gt=0, le=3650)] = defaults.HOT_RETENTION_DAYS
    """days Prometheus keeps metrics locally."""
    cold_retention_days: Annotated[Int, Field(gt=0, le=36500)] = defaults.COLD_RETENTION_DAYS
    """days the cold tier keeps metrics."""
    gpu_util_low_pct: Percent = defaults.GPU_UTIL_LOW_PCT
    """% average utilization under which a GPU is a tuning opportunity."""
    # The alert's PromQL range `[<h>h]`, evaluated every minute over the hot tier: a month at most.
    gpu_util_low_window_h: Annotated[Int, Field(gt=0, le=720)] = defaults.GPU_UTIL_LOW_WINDOW_H
    """hours the utilization average spans."""
    gpu_temp_incident_c: Temperature = defaults.GPU_TEMP_INCIDENT_C
    """C; GPU temperature that raises an incident."""
    # The alerts' shortest rate() windows are 10 minutes over recorded series, which get one sample per evaluation:
    # at most 2 minutes keeps several in each window, and every recorded series inside Prometheus' 5-minute lookback.
    rule_evaluation_interval_s: Annotated[Int, Field(gt=0, le=120)] = defaults.RULE_EVALUATION_INTERVAL_S
    """s between evaluations of the stack's rule groups (each group's `interval`)."""
    storage_class: Annotated[str, Field(min_length=1)] = defaults.METRICS_STORAGE_CLASS
    """StorageClass of the hot and cold tiers' volumes, sized from retention and ingest (components.monitoring.
    prometheus); default the replicated CephFS class, so a tier outlives its pod and its node."""


ClassName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$", max_length=63)]
"""A scheduling class: a Slurm QoS name and, without `_`, a Kubernetes PriorityClass name."""


class Workload(StrEnum):
    INFERENCE = "inference"
    """Online serving: training never preempts it, on either scheduler."""
    TRAINING = "training"
    """Training, batch and short jobs: everything that is not online serving; the preemptible side."""
    PLATFORM = "platform"
    """The operators' own urgent work (drills, recovery)."""


class SchedulingClass(Spec):
    """One row of the preemption table; the same row drives Kubernetes and Slurm."""

    name: ClassName
    workload: Workload
    kubernetes_priority: Annotated[Int, Field(gt=0, lt=1_000_000_000)] | None = None
    """PriorityClass value; None: not a Kubernetes class (user classes stay below 1e9, where system ones start)."""
    # sacctmgr's QoS Priority is 32-bit; Slurm keeps 0xfffffffe and 0xffffffff for "unset" and "infinite".
    slurm_priority: Annotated[Int, Field(ge=0, le=0xfffffffd)] | None = None
    """Slurm QoS priority, weighted by PriorityWeightQOS; None: not a Slurm QoS."""
    preempts: list[ClassName] = []
    """Classes whose running work this class may preempt (Slurm `Preempt=`); on Kubernetes every lower class
    must be listed, because kube-scheduler and Kueue preempt by priority value, not by list."""
    preemptible: bool = True
    """False: nothing may preempt it (no class may list it in `preempts`)."""
    for_teams: bool = True
    """Whether teams may use it: False keeps it out of team Slurm accounts and, by a quota of zero pods of the class,
    out of team namespaces, so no team can walk around the preemption table."""
    description: str = ""
    """What the class is for; becomes the PriorityClass description."""


DEFAULT_CLASSES = (
    SchedulingClass(name="critical", workload=Workload.PLATFORM, slurm_priority=defaults.QOS_CRITICAL,
                    preempts=["train_high", "train_normal", "train_preemptible"], preemptible=False, for_teams=False,
                    description="Operators' urgent work on Slurm nodes (drills, recovery)."),
    SchedulingClass(name="inference", workload=Workload.INFERENCE, kubernetes_priority=defaults.PRIORITY_INFERENCE,
                    slurm_priority=defaults.QOS_INFERENCE,
                    preempts=["production", "staging", "dev", "train_preemptible"],
                    preemptible=False, for_teams=False,
                    description="Online inference: preempts batch work at a peak, never preempted."),
    SchedulingClass(name="production", workload=Workload.TRAINING, kubernetes_priority=defaults.PRIORITY_PRODUCTION,
                    preempts=["staging", "dev"], description="Production batch and short jobs on Kubernetes."),
    SchedulingClass(name="staging", workload=Workload.TRAINING, kubernetes_priority=defaults.PRIORITY_STAGING,
                    preempts=["dev"], description="Staging and evaluation jobs on Kubernetes."),
    SchedulingClass(name="train_high", workload=Workload.TRAINING, slurm_priority=defaults.QOS_TRAIN_HIGH,
                    preempts=["train_normal", "train_preemptible"]),
    SchedulingClass(name="train_normal", workload=Workload.TRAINING, slurm_priority=defaults.QOS_TRAIN_NORMAL,
                    preempts=["train_preemptible"]),
    SchedulingClass(name="dev", workload=Workload.TRAINING, kubernetes_priority=defaults.PRIORITY_DEV,
                    description="Development and notebooks; the default for pods that name no class."),
    SchedulingClass(name="train_preemptible", workload=Workload.TRAINING,
                    slurm_priority=defaults.QOS_TRAIN_PREEMPTIBLE),
)


class Scheduling(Spec):
    classes: Annotated[list[SchedulingClass], Field(min_length=1)] = list(DEFAULT_CLASSES)
    """The one preemption table, highest first: Kubernetes PriorityClasses and Slurm QoS are both rendered from it
    (components.scheduling.preemption checks that both orders agree and that training never preempts inference)."""
    team_default_class: ClassName = "train_normal"
    """Slurm QoS a team's job gets without --qos (a Slurm class open to teams)."""
    # Kueue's waitForPodsReady.timeout (`<m>m`); a gang not ready within a day is stuck.
    pods_ready_timeout_minutes: Annotated[Int, Field(gt=0, le=1440)] = defaults.PODS_READY_TIMEOUT_MINUTES
    """minutes an admitted Kueue workload may take to get all its pods ready before it is evicted and requeued
    (all-or-nothing admission)."""


class Stage(Spec):
    name: Name
    # The rollout adds it to the stage's start as a timedelta (a datetime ends in year 9999); a year at most.
    min_soak_days: Annotated[Int, Field(ge=0, le=365)]
    """days this stage must run before the next may be requested."""
    max_teams: Annotated[Int, Field(gt=0, le=1000)] | None = None
    """Teams onboarded by this stage and the ones before it, at most (None: no limit)."""


DEFAULT_STAGES = (
    # The first stage onboards no team: it deploys the platform the acceptance campaign runs on
    # (components.site.rules.check_first_stage_empty).
    Stage(name="platform", min_soak_days=defaults.PLATFORM_SOAK_DAYS),
    Stage(name="canary", min_soak_days=defaults.CANARY_SOAK_DAYS, max_teams=defaults.CANARY_MAX_TEAMS),
    Stage(name="half", min_soak_days=defaults.HALF_SOAK_DAYS, max_teams=defaults.HALF_MAX_TEAMS),
    Stage(name="full", min_soak_days=0),
)


class Team(Spec):
    name: Name
    """Becomes the team's namespace, Slurm account and Grafana folder."""
    stage: Name
    """The rollout stage that onboards the team (stages[].name)."""
    slack_channel: Annotated[str, Field(pattern=r"^#[a-z0-9][-_a-z0-9]*$")]
    """Where the team's tuning alerts go."""
    gpu_quota: dict[str, GpuCount] = {}
    """Most GPUs per kubernetes-pool Kueue flavor (`<gpu>-kubernetes`, e.g. `a800-kubernetes`, `rtx4090-kubernetes`)
    the team's jobs may hold; a flavor left out gets components.site.defaults.TEAM_GPU_QUOTA."""
    gpu_guaranteed: dict[str, GpuCount] = {}
    """GPUs per kubernetes-pool flavor set aside for the team (its queue's nominal quota, taken out of the pool's):
    part of gpu_quota, not on top of it. The team reclaims them from other teams' borrowed jobs of lower priority,
    up to the highest preemptible class (never inference). None unless given."""
    # sacctmgr's Fairshare= shares (32-bit); a million to one is past any split of the cluster.
    fairshare: Annotated[Int, Field(gt=0, le=1_000_000)] = defaults.TEAM_FAIRSHARE
    """Slurm fairshare shares of the team's account, relative to the other teams'."""

    def gpu_quota_on(self, flavor: str) -> int:
        """Most GPUs of a Kueue flavor the team's jobs may hold: its gpu_quota, or the default for a flavor left out."""
        return self.gpu_quota.get(flavor, defaults.TEAM_GPU_QUOTA)


class Gates(Spec):
    # Compared with the count of firing alerts the gates read from Prometheus.
    max_firing_critical: Annotated[Int, Field(ge=0, le=1000)] = defaults.GATE_MAX_FIRING_CRITICAL
    min_gpu_util_pct: Percent = defaults.GATE_MIN_GPU_UTIL_PCT
    max_train_queue_minutes: Annotated[Float, Field(gt=0, le=10080)] = defaults.GATE_MAX_TRAIN_QUEUE_MINUTES
    max_inference_error_pct: Percent = defaults.GATE_MAX_INFERENCE_ERROR_PCT


class Rollout(Spec):
    gates: Gates = Gates()
    """Health gates checked when approval is requested and again right before apply."""
    prometheus_url: Annotated[str, Field(pattern=r"^https?://\S+[^/]$")] = PROMETHEUS_URL
    """Prometheus whose HTTP API the gates query (the Prometheus Operator's service; example host: set it)."""
    gate_window_minutes: Annotated[Float, Field(gt=0, le=10080)] = defaults.GATE_WINDOW_MINUTES
    """minutes of history the utilization, queue-time and error-rate gates average over."""
    policy_pack: Annotated[str, Field(min_length=1)] = "policy"
    """Directory of the policy pack, relative to the project, that every rollout preview and update runs."""


class SlackReceiver(StrEnum):
    SOCKET_MODE = "socket_mode"
    """Outbound websocket; needs no public ingress (the default for an on-prem cluster)."""
    HTTP = "http"
    """Signed HTTP requests to an endpoint Slack can reach."""


class Slack(Spec):
    channel: Annotated[str, Field(pattern=r"^#[a-z0-9][-_a-z0-9]*$")]
    """Where approval requests are posted."""
    incident_channel: Annotated[str, Field(pattern=r"^#[a-z0-9][-_a-z0-9]*$")]
    """Where critical alerts go."""
    approver_group: Annotated[str, Field(pattern=r"^S[A-Z0-9]+$")]
    """Slack user group id (S...) whose members may approve a stage."""
    workspace_id: Annotated[str, Field(pattern=r"^T[A-Z0-9]+$")]
    """Slack workspace id (T...): clicks from any other workspace are refused, and the requester's token must be
    from it."""
    app_id: Annotated[str, Field(pattern=r"^A[A-Z0-9]+$")]
    """The rollout Slack app's id (A...): clicks sent to any other app are refused."""
    # Distinct approvers from approver_group; more than 20 would block every stage.
    approvals_required: Annotated[Int, Field(gt=0, le=20)] = defaults.APPROVALS_REQUIRED
    # The rollout compares a request's age with it as a timedelta; an approval older than 30 days judged another
    # cluster (and a huge one overflowed the datetime arithmetic).
    approval_ttl_hours: Annotated[Int, Field(gt=0, le=720)] = defaults.APPROVAL_TTL_HOURS
    receiver: SlackReceiver = SlackReceiver.SOCKET_MODE
    receiver_address: ListenAddress = "127.0.0.1"
    """The address the HTTP receiver (`receiver: http`, `gpuctl rollout wait`) binds to: loopback by default, behind
    the site's TLS ingress on the same host. It holds at most runbooks.rollout.receivers.MAX_CONNECTIONS connections
    and closes one silent for READ_TIMEOUT_S."""
    receiver_port: Port = 3000
    """TCP port of the HTTP receiver on receiver_address (the ingress forwards /slack/interactions to it)."""


class NodeCheck(Spec):
    min_driver_version: Annotated[str, Field(pattern=r"^\d+(\.\d+)+$")] = defaults.MIN_DRIVER_VERSION
    """Oldest NVIDIA driver the site accepts (dotted version): gpu_operator.driver_version may not be older, and
    each node must run exactly that operator's driver."""
    # `dcgmi diag -r` takes suite levels 1 to 4 (dcgmi diag reference, docs.nvidia.com/datacenter/dcgm).
    diag_level: Annotated[Int, Field(ge=1, le=4)] = defaults.DIAG_LEVEL
    """DCGM diagnostic run level: its per-test verdict admits the node, and its load is the burn-in during which
    the hottest GPU must stay under monitoring.gpu_temp_incident_c without throttling."""
    # The node check's --diag-timeout-s; dcgmi's own protocol gives up after 8 h (NVIDIA/DCGM issue 120).
    diag_timeout_s: Annotated[Int, Field(gt=0, le=8 * 3600)] = defaults.DIAG_TIMEOUT_S
    """seconds the diagnostic may run before the check stops it and fails the node."""
    driver_wait_s: Annotated[Int, Field(gt=0, le=7200)] = defaults.DRIVER_WAIT_S
    """seconds the check waits for the GPU Operator's driver on the node before failing it."""


class Alerting(Spec):
    # No defaults for the endpoints: every site has its own, and a placeholder host (example.internal, .test, ...)
    # is refused, since an alert sent there reaches nobody (components/site/endpoints.py).
    runbook_base_url: Annotated[str, Field(pattern=r"^https?://\S+[^/]$"), REAL_HOST]
    """Where docs/sop/ is browsable; every alert links `<base>/<alert-kebab>.md`."""
    platform_channel: Annotated[str, Field(pattern=r"^#[a-z0-9][-_a-z0-9]*$")] = "#gpu-platform"
    """Where warnings and tuning alerts that no team owns go."""
    oncall_webhook_url: SiteUrl
    """The on-call pager's Alertmanager webhook, outside this cluster or a Service the stack deploys (not secret; its
    bearer token is the `oncall-token` file)."""
    heartbeat_url: SiteUrl
    """A dead-man's switch outside this cluster that pages when Alertmanager's Watchdog heartbeats stop, so a dead
    alerting pipeline is noticed (its bearer token is the `heartbeat-token` file)."""
    secrets_dir: Annotated[str, Field(pattern=r"^/\S+[^/]$")] = "/etc/alertmanager/secrets"
    """Directory mounted into Alertmanager holding `slack-api-url`, `oncall-token` and `heartbeat-token` (never
    inline)."""
    hbm_temp_incident_c: Temperature = defaults.HBM_TEMP_INCIDENT_C
    """C; HBM temperature that raises an incident (A100/A800 SXM4 report Memory Max Operating Temp
    95 C in `nvidia-smi -q -d TEMPERATURE`)."""
    thermal_throttle_pct: Percent = defaults.THERMAL_THROTTLE_PCT
    """% of the last 10 minutes a GPU may spend clocked down for heat before a warning."""
    overheat_for_s: Annotated[Int, Field(ge=0, le=3600)] = defaults.OVERHEAT_FOR_S
    """s a GPU or its HBM must stay over its incident temperature before it pages (the alerts' `for`)."""
    group_wait_s: Annotated[Int, Field(ge=0, le=600)] = defaults.GROUP_WAIT_S
    """s Alertmanager's route waits after a group's first alert before it notifies (`route.group_wait`)."""
    # Alternatives of the alert's PromQL regex; NVIDIA's XID catalog ends below 200.
    xid_hardware: Annotated[tuple[Annotated[Int, Field(gt=0, le=999)], ...], Field(min_length=1)] = (
        48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120)
    """XIDs that mean the GPU, its memory, NVLink or GSP failed (NVIDIA XID catalog,
    docs.nvidia.com/deploy/xid-errors); any other XID is the application's (13, 31, 43, 45, ...). Each must be in
    components.site.xid.XID_CATALOGUE."""

    _known_xids = field_validator("xid_hardware")(known_xids)


# A Debian package version, upstream-revision (deb-version(7)).
DebianVersion = Annotated[str, Field(pattern=r"^\d+(\.\d+)*-[A-Za-z0-9.+~]+$")]


class HostArtifact(Spec):
    """A Debian package built for the site (`make artifacts`, docs/gpu-driver.md) that every Slurm host installs from
    slurm.containers.mirror_url; the deploy refuses a download whose sha256 is not this one."""

    file: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.+~_-]*\.deb$", max_length=255)]
    """The package's file name on the mirror (`enroot_4.1.2-1_amd64.deb`)."""
    package_version: DebianVersion
    """The version the package installs (dpkg's Version): a host holding it, unmodified (`dpkg --verify`), downloads
    nothing."""
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    """sha256 of the file (`sha256sum`, lower-case hex): what the site built and put on its mirror."""


class SlurmContainers(Spec):
    """Slurm's container path (Pyxis and enroot), installed on the controller and every node (docs/gpu-driver.md)."""

    # curl(1) fetches `<mirror_url>/<file>` on each host: http(s), or file:// for a mirror mounted on every host.
    mirror_url: Annotated[str, Field(pattern=r"^(https?://[A-Za-z0-9.-]+(:\d+)?|file://)(/[A-Za-z0-9._~%+-]+)+$",
                                     max_length=1024)]
    """The site's artifact mirror: a folder of packages, reachable from every Slurm host."""
    enroot: HostArtifact
    """enroot (NVIDIA/enroot): turns a job's image into an unprivileged container; its GPU hook hands the container
    the GPU Operator's driver."""
    pyxis: HostArtifact
    """Pyxis (NVIDIA/pyxis): the SPANK plugin behind srun/sbatch --container-image, built against
    slurm.package_version's Slurm."""


class SlurmSettings(Spec):
    """Slurm controller and daemons; rendered by components.slurm.conf (QoS come from scheduling.classes)."""

    # One sources.list(5) line: `deb [options] URI suite component...`.
    package_source: Annotated[str, Field(pattern=r"^deb (\[[^\]\n]*\] )?https?://\S+ \S+( \S+)+$")] = (
        defaults.SLURM_PACKAGE_SOURCE)
    """The apt source every Slurm host installs slurmctld, slurmdbd, slurmd, slurm-client and munge from (written to
    /etc/apt/sources.list.d/gpucluster-slurm.list)."""
    # A Debian version: upstream-revision (deb-version(7)); the slurm-version rule reads its upstream part.
    package_version: Annotated[str, Field(pattern=r"^\d+\.\d+\.\d+-[A-Za-z0-9.+~]+$")] = defaults.SLURM_PACKAGE_VERSION
    """The Debian version of the Slurm packages, the same on every host (apt installs exactly it; the deploy fails
    on a host where another is installed after it); Slurm 22.05 or newer."""
    controller_host: Hostname = "slurm-controller"
    """Hostname of the slurmctld and slurmdbd machine, resolvable from every node."""
    slurmctld_port: Port = 6817
    """TCP port of slurmctld (the slurm.conf(5) default)."""
    slurmd_port: Port = 6818
    """TCP port of slurmd on every node (the slurm.conf(5) default)."""
    slurmdbd_port: Port = 6819
    """TCP port of slurmdbd (the slurmdbd.conf(5) default)."""
    state_save_dir: AbsolutePath = "/var/spool/slurmctld"
    """Where slurmctld keeps its state; must survive reboots (Debian's slurmctld package default)."""
    slurmd_spool_dir: AbsolutePath = "/var/spool/slurmd"
    """Where each slurmd keeps batch scripts and its state (Debian's slurmd package default)."""
    log_dir: AbsolutePath = "/var/log/slurm"
    """Where the daemons write their logs (Debian's slurm-wlm default)."""
    run_dir: AbsolutePath = "/run"
    """Where the daemons write their PID files (Debian's units read them there)."""
    # A POSIX user name (useradd(8)'s default NAME_REGEX).
    slurm_user: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]*$", max_length=32)] = "slurm"
    """The user slurmctld and slurmdbd run as (slurm.conf(5) SlurmUser), who owns their state, and who logs in to
    MariaDB over its socket (unix_socket authentication: the OS user is the database user; the Debian packages make
    `slurm`, and the deploy makes any other as a system user on the controller and the nodes)."""
    munge_socket: AbsolutePath = "/run/munge/munge.socket.2"
    """The MUNGE daemon's socket on every Slurm host (munged(8) --socket; the munge package's default), named by
    slurm.conf(5) AuthInfo and AccountingStoragePass and slurmdbd.conf(5) AuthInfo."""
    scripts_dir: AbsolutePath = "/etc/slurm"
    """Where every node holds the job scripts slurm.conf names (prolog.sh, epilog.sh): configless slurmd in 22.05
    fetches the config files, never the scripts."""
    programs_dir: AbsolutePath = "/usr/local/lib/gpucluster"
    """Where Slurm hosts hold the stack's host programs: the checkpoint mover the epilog starts, the Slurm exporter."""
    gpu_device_prefix: AbsolutePath = "/dev/nvidia"
    """The GPU character devices gres.conf binds, `<prefix><index>` (the NVIDIA driver's: major 195, minor = GPU
    index; gres.conf(5) File)."""
    config_overrides: bool = False
    """slurmd takes each node's CPUs, memory and GPUs from slurm.conf, not from what it detects (slurm.conf(5)
    SlurmdParameters=config_overrides): for emulated nodes only; a real node that has less would take jobs it cannot
    run."""
    # slurm.conf(5) SlurmdTimeout: "The value may not exceed 65533 seconds".
    slurmd_timeout_s: Annotated[Int, Field(gt=0, le=65533)] = defaults.SLURMD_TIMEOUT_S
    """s slurmctld waits for a node's slurmd to answer before it sets the node DOWN and requeues its jobs: how long
    a power loss goes unseen by Slurm (the node-failure drill must be given at least this long to detect it)."""
    exporter_port: Port = defaults.SLURM_EXPORTER_PORT
    """TCP port of the Slurm exporter (hosts/slurm_exporter.py) on the controller; Prometheus scrapes it."""
    # At most 2 minutes: an instant query (SlurmNodesUnavailable) sees a series only within 5 minutes of its scrape.
    exporter_interval_s: Annotated[Int, Field(gt=0, le=120)] = defaults.SLURM_EXPORTER_INTERVAL_S
    """s between the Slurm exporter's polls of sinfo and sacct, and Prometheus' scrape interval of it (each scrape
    sees news)."""
    exporter_address: ListenAddress = "127.0.0.1"
    """The address the Slurm exporter's /metrics binds to on the controller (one interface, never all): loopback by
    default. Prometheus scrapes controller_host at exporter_port, so a site sets the address that name resolves to;
    until then its scrape target is down. At most hosts.slurm_exporter.METRICS_MAX_CONNECTIONS connections, each closed
    after LISTENER_TIMEOUT_S of silence."""
    os_memory_reserve_pct: Annotated[Float, Field(ge=0, lt=50)] = defaults.SLURM_OS_MEMORY_RESERVE_PCT
    """% of a node's installed memory kept out of RealMemory: the kernel's page map alone is ~1.6 %
    (64 B per 4 KiB page), plus firmware holes, the OS, slurmd, the GPU driver's pinned buffers and the
    NFS page cache. A RealMemory above what slurmd detects would drain the node."""
    # Slurm's DefMemPerGPU= in MiB; no node holds more than node_groups[].memory_gib's 64 TiB.
    def_mem_per_gpu_gib: Annotated[Int, Field(gt=0, le=65536)] = defaults.SLURM_DEF_MEM_PER_GPU_GIB
    """GiB of host memory a job gets per allocated GPU unless it asks (--mem); without it a 1-GPU job
    would be given the whole node's memory and block the other 7 GPUs."""
    priority_weight_qos: PriorityWeight = defaults.SLURM_PRIORITY_WEIGHT_QOS
    """Weight of the QoS factor in multifactor priority; larger than fairshare so QoS orders the queue first."""
    priority_weight_fairshare: PriorityWeight = defaults.SLURM_PRIORITY_WEIGHT_FAIRSHARE
    """Weight of the fairshare factor; orders jobs of one QoS by how little each account has used lately."""
    flex_qos: list[ClassName] = list(defaults.FLEX_QOS)
    """The Slurm QoS the flex partitions admit (slurm.conf AllowQos), each one a lend may requeue (the flex-qos rule):
    a job of any other QoS on a flex node would hold it against inference at a peak, so such jobs go to the training
    partitions and Slurm refuses them on a flex partition at submission."""
    containers: SlurmContainers
    """Where each Slurm host gets Pyxis and enroot, so GPU job steps run in containers on the operator's driver."""


class GpuOperator(Spec):
    driver_version: Annotated[str, Field(pattern=r"^\d+(\.\d+)+$")] = defaults.GPU_DRIVER_VERSION
    """NVIDIA driver the operator installs on every GPU node, the one driver Kubernetes and Slurm share."""
    namespace: Name = "gpu-operator"
    hpc_job_mapping_dir: AbsolutePath = HPC_JOB_MAPPING_DIR
    """Where Slurm's prolog writes, per GPU index, the job holding it, and the DCGM exporter reads it to label that
    GPU's metrics `hpc_job` (the operator's dcgmExporter.hpcJobMapping.directory)."""


def _with_builtin_catalog(overrides: Any) -> Any:
    return {**GPU_CATALOG, **overrides} if isinstance(overrides, dict) else overrides


class Site(Spec):
    site_name: Name
    stage: Name
    """The rollout stage deployed now (stages[].name)."""
    ssh_user: Annotated[str, Field(min_length=1)]
    """User the node checks and Slurm deploy log in as (its key is the secret ssh_private_key)."""
    bmc_user: Annotated[str, Field(min_length=1)]
    """BMC user (its password is the secret bmc_password)."""
    gpu_catalog: Annotated[dict[LabelValue, GpuModel], BeforeValidator(_with_builtin_catalog)] = Field(
        default_factory=dict, validate_default=True)
    """GPU models by name; entries given here add to or replace the built-in catalog."""
    rooms: Annotated[list[Room], Field(min_length=1)]
    racks: Annotated[list[Rack], Field(min_length=1)]
    node_groups: Annotated[list[NodeGroup], Field(min_length=1)]
    storage: Storage
    monitoring: Monitoring = Monitoring()
    alerting: Alerting
    scheduling: Scheduling = Scheduling()
    teams: Annotated[list[Team], Field(min_length=1)]
    stages: Annotated[list[Stage], Field(min_length=1)] = list(DEFAULT_STAGES)
    """Rollout stages in order; each team names the one that onboards it, never the first (the first `pulumi up`
    deploys the platform alone, and the acceptance campaign on it must pass before a team is requested)."""
    rollout: Rollout = Rollout()
    slack: Slack
    slurm: SlurmSettings
    node_check: NodeCheck = NodeCheck()
    """How each node proves itself before it takes work."""
    gpu_operator: GpuOperator = GpuOperator()
    inference: Inference = Inference()
    lending: Lending = Lending()
    """When the flex controller lends flex nodes to Kubernetes inference and takes them back."""
    health: Health = Health()
    """When the node health controller drains, diagnoses and returns GPU nodes, or hands them to a human."""
    acceptance: Acceptance = Acceptance()
    """The acceptance campaign (soak, shock, drills) that must pass before any team is onboarded."""
    mirror: Mirror = Mirror()
    """Where an air-gapped site keeps the charts and images (each optional; none by default)."""
    kubernetes_version: Annotated[str, Field(pattern=r"^1\.\d+$")] = defaults.KUBERNETES_VERSION
    """Minor version of the cluster's Kubernetes (`1.30`): charts are rendered and their objects validated for it."""

    def gpu(self, group: NodeGroup) -> GpuModel:
        return self.gpu_catalog[group.gpu_model]

    def platform_w(self, group: NodeGroup) -> float:
        if group.platform_w is not None:
            return group.platform_w
        return defaults.PLATFORM_W[self.gpu(group).gpu_class]

    def teams_onboarded(self) -> list[Team]:
        """Teams whose stage is the current stage or one before it, in spec order."""
        order = [s.name for s in self.stages]
        now = order.index(self.stage)
        return [t for t in self.teams if order.index(t.stage) <= now]
