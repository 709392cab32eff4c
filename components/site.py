"""The site spec: the one description of the site that every component reads.

Pure data (pydantic v2, frozen, unknown keys rejected). Field names are the keys of the stack file
(`Pulumi.<stack>.yaml`, namespace `gpu-cluster:`), so an error path such as
`racks[2].cooling.capacity_kw` points straight at the line to fix. Defaults live in
`components.defaults`; rules that span fields live in `components.rules`.
"""

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from components import defaults
from components.catalog import GPU_CATALOG, GpuClass

# DNS-1123 label: these names become Kubernetes object names, Slurm node names and hostnames.
Name = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
Percent = Annotated[float, Field(ge=0, lt=100)]


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class GpuModel(Spec):
    tdp_w: Annotated[float, Field(gt=0)]
    """W; the board power limit the GPU may draw at full load."""
    memory_gb: Annotated[int, Field(gt=0)]
    """GB of device memory."""
    gpu_class: GpuClass
    """How the GPU must be housed (dense GPUs need >= 40 kW liquid or in-row cooled racks)."""
    source: Annotated[str, Field(min_length=1)]
    """Where the figures come from (datasheet and year)."""
    smi_name: Annotated[str, Field(min_length=1)]
    """The name `nvidia-smi --query-gpu=name` prints; the node check compares against it."""


class CoolingType(StrEnum):
    AIR = "air"
    REAR_DOOR = "rear_door"
    IN_ROW_CHILLED_WATER = "in_row_chilled_water"
    DIRECT_LIQUID = "direct_liquid"
    IMMERSION = "immersion"


class Cooling(Spec):
    type: CoolingType
    """How heat leaves the rack."""
    capacity_kw: Annotated[float, Field(gt=0)]
    """kW of heat the rack's cooling removes (from the cooling design, not the nameplate of the room)."""


class Feed(StrEnum):
    A = "A"
    B = "B"


class Pdu(Spec):
    name: Name
    feed: Feed
    """Which of the two independent power paths feeds this PDU."""
    voltage_v: Annotated[float, Field(gt=0)]
    """V; line-to-line for three-phase, line-to-neutral for single-phase."""
    current_a: Annotated[int, Field(gt=0)]
    """A; the socket and breaker rating (32 or 63)."""
    phases: Annotated[int, Field(ge=1, le=3)]
    """1 or 3."""


class Room(Spec):
    name: Name
    description: str = ""


class Rack(Spec):
    name: Name
    room: Name
    """The room the rack stands in (rooms[].name)."""
    power_budget_kw: Annotated[float, Field(gt=0)]
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
    ssh_host: Annotated[str, Field(min_length=1)]
    """Address the node is reached at over SSH for validation and Slurm."""
    bmc_host: Annotated[str, Field(min_length=1)]
    """Address of the node's BMC (IPMI) for PSU and power readings."""


class Pool(StrEnum):
    KUBERNETES = "kubernetes"
    """Online inference, short and elastic jobs."""
    SLURM = "slurm"
    """Long, offline and preemptible training."""
    FLEX = "flex"
    """Slurm by default; lendable to Kubernetes at an inference peak."""


class NodeGroup(Spec):
    name: Name
    gpu_model: str
    """A key of gpu_catalog."""
    gpus_per_node: Annotated[int, Field(gt=0, le=16)]
    platform_w: Annotated[float, Field(gt=0)] | None = None
    """W a node draws apart from its GPUs; default by GPU class (components.defaults.PLATFORM_W)."""
    psu_efficiency: Annotated[float, Field(gt=0, le=1)] = defaults.PSU_EFFICIENCY
    """Fraction of wall power the node's PSUs deliver as DC."""
    cpus: Annotated[int, Field(gt=0)]
    """CPU cores per node (Slurm CPUs=)."""
    memory_gib: Annotated[int, Field(gt=0)]
    """GiB of host memory per node (Slurm RealMemory=)."""
    pool: Pool
    nodes: Annotated[list[Node], Field(min_length=1)]


class NvmeTier(Spec):
    cache_gib: Annotated[int, Field(gt=0)]
    """GiB of local NVMe per GPU node for model weights and LoRA adapters."""


class NfsHotTier(Spec):
    servers: Annotated[list[str], Field(min_length=1)]
    """NFS servers for the hot tier; teams are spread over them, never one for everything."""
    capacity_tib: Annotated[float, Field(gt=0)]
    """TiB of hot-tier capacity in all."""
    keep_checkpoints: Annotated[int, Field(gt=0)] = defaults.HOT_CHECKPOINT_KEEP
    """Newest checkpoints per run directory kept on the hot tier."""


class CephColdTier(Spec):
    capacity_tib: Annotated[float, Field(gt=0)]
    """TiB of cold-tier (Ceph) capacity."""
    archive_after_days: Annotated[int, Field(gt=0)] = defaults.COLD_ARCHIVE_AFTER_DAYS
    """days after which a checkpoint moves from hot to cold."""


class Storage(Spec):
    nvme: NvmeTier
    nfs_hot: NfsHotTier
    ceph_cold: CephColdTier


class Monitoring(Spec):
    hot_retention_days: Annotated[int, Field(gt=0)] = defaults.HOT_RETENTION_DAYS
    """days Prometheus keeps metrics locally."""
    cold_retention_days: Annotated[int, Field(gt=0)] = defaults.COLD_RETENTION_DAYS
    """days the cold tier keeps metrics."""
    gpu_util_low_pct: Percent = defaults.GPU_UTIL_LOW_PCT
    """% average utilization under which a GPU is a tuning opportunity."""
    gpu_util_low_window_h: Annotated[int, Field(gt=0)] = defaults.GPU_UTIL_LOW_WINDOW_H
    """hours the utilization average spans."""
    gpu_temp_incident_c: Annotated[float, Field(gt=0)] = defaults.GPU_TEMP_INCIDENT_C
    """C; GPU temperature that raises an incident."""


class Priorities(Spec):
    production: Annotated[int, Field(gt=0, lt=1_000_000_000)] = defaults.PRIORITY_PRODUCTION
    staging: Annotated[int, Field(gt=0, lt=1_000_000_000)] = defaults.PRIORITY_STAGING
    dev: Annotated[int, Field(gt=0, lt=1_000_000_000)] = defaults.PRIORITY_DEV


class Scheduling(Spec):
    priorities: Priorities = Priorities()
    """Kubernetes PriorityClass values; production > staging > dev."""


class Stage(Spec):
    name: Name
    min_soak_days: Annotated[int, Field(ge=0)]
    """days this stage must run before the next may be requested."""
    max_teams: Annotated[int, Field(gt=0)] | None = None
    """Teams onboarded by this stage and the ones before it, at most (None: no limit)."""


DEFAULT_STAGES = (
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


class Gates(Spec):
    max_firing_critical: Annotated[int, Field(ge=0)] = defaults.GATE_MAX_FIRING_CRITICAL
    min_gpu_util_pct: Percent = defaults.GATE_MIN_GPU_UTIL_PCT
    max_train_queue_minutes: Annotated[float, Field(gt=0)] = defaults.GATE_MAX_TRAIN_QUEUE_MINUTES
    max_inference_error_pct: Percent = defaults.GATE_MAX_INFERENCE_ERROR_PCT


class Rollout(Spec):
    gates: Gates = Gates()
    """Health gates checked when approval is requested and again right before apply."""


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
    approvals_required: Annotated[int, Field(gt=0)] = defaults.APPROVALS_REQUIRED
    approval_ttl_hours: Annotated[int, Field(gt=0)] = defaults.APPROVAL_TTL_HOURS
    receiver: SlackReceiver = SlackReceiver.SOCKET_MODE


class NodeCheck(Spec):
    min_driver_version: Annotated[str, Field(pattern=r"^\d+(\.\d+)+$")] = defaults.MIN_DRIVER_VERSION
    """Oldest NVIDIA driver a node may run (dotted version)."""
    burn_in_s: Annotated[int, Field(gt=0, le=3600)] = defaults.BURN_IN_S
    """seconds of load during which the hottest GPU must stay under monitoring.gpu_temp_incident_c."""
    burn_command: Annotated[str, Field(min_length=1)] = defaults.BURN_COMMAND
    """Command that loads every GPU on the node for the burn-in."""


class Site(Spec):
    site_name: Name
    stage: Name
    """The rollout stage deployed now (stages[].name)."""
    ssh_user: Annotated[str, Field(min_length=1)]
    """User the node checks and Slurm deploy log in as (its key is the secret ssh_private_key)."""
    bmc_user: Annotated[str, Field(min_length=1)]
    """BMC user (its password is the secret bmc_password)."""
    gpu_catalog: dict[str, GpuModel] = Field(default_factory=lambda: _catalog({}), validate_default=True)
    """GPU models by name; entries given here add to or replace the built-in catalog."""
    rooms: Annotated[list[Room], Field(min_length=1)]
    racks: Annotated[list[Rack], Field(min_length=1)]
    node_groups: Annotated[list[NodeGroup], Field(min_length=1)]
    storage: Storage
    monitoring: Monitoring = Monitoring()
    scheduling: Scheduling = Scheduling()
    teams: Annotated[list[Team], Field(min_length=1)]
    stages: Annotated[list[Stage], Field(min_length=1)] = list(DEFAULT_STAGES)
    """Rollout stages in order; each team names the one that onboards it."""
    rollout: Rollout = Rollout()
    slack: Slack
    node_check: NodeCheck = NodeCheck()
    """How each node proves itself before it takes work."""

    @field_validator("gpu_catalog", mode="before")
    @classmethod
    def _merge_catalog(cls, value: Any) -> Any:
        return _catalog(value) if isinstance(value, dict) else value

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


def _catalog(overrides: dict[str, Any]) -> dict[str, Any]:
    return {**GPU_CATALOG, **overrides}
