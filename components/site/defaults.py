"""Named defaults for the site spec, each with its unit and where the figure comes from.

Every number a component needs and the site may leave out is here, in one place, so a reviewer
can check the figures against their sources without reading the components.
"""

from typing import Final

from components.site.catalog import GpuClass
from components.site.wellknown import COLD_CLASS

KUBERNETES_VERSION: Final = "1.30"
"""Kubernetes minor version the charts are rendered and validated for. Within every pinned chart's `kubeVersion`
(kube-prometheus-stack 77.5.0 and victoria-metrics-single 0.12.2: >= 1.25; gpu-operator v25.10.1: >= 1.16; the
others state none)."""

# --- metrics volumes ---

METRICS_STORAGE_CLASS: Final = COLD_CLASS
"""StorageClass of the metrics tiers' volumes: CephFS, three replicas (the stack's cold tier)."""
METRIC_SERIES_PER_GPU: Final = 60
"""Series per GPU: the DCGM exporter's counters (components/gpu_operator/dcgm_counters.py, about 40) and the
recording rules over them; an estimate, rounded up."""
METRIC_SERIES_PER_NODE: Final = 2500
"""Series per node: node-exporter (about 1,000 on a server) and the kubelet's cAdvisor per running container."""
METRIC_SERIES_CLUSTER: Final = 20000
"""Series the cluster adds whatever its size: kube-state-metrics, the API server, Kueue, the operators."""
DCGM_SCRAPE_INTERVAL_S: Final = 15
"""s between scrapes of the DCGM exporter: finer than the rest, so a thermal spike shows."""
SCRAPE_INTERVAL_S: Final = 30
"""s; kube-prometheus-stack's default scrapeInterval, which every other target keeps."""
PROMETHEUS_BYTES_PER_SAMPLE: Final = 2.0
"""Prometheus docs, "Storage, operational aspects": on average 1-2 bytes per sample; the upper figure."""
VICTORIAMETRICS_BYTES_PER_SAMPLE: Final = 1.0
"""VictoriaMetrics docs, "Capacity planning": under 1 byte per sample on typical data; rounded up."""
METRICS_VOLUME_HEADROOM: Final = 1.5
"""Volume over the retained samples: the WAL, the head block and compaction's temporary copies."""

# --- power ----------------------------------------------------------------------------------

POWER_HEADROOM_PCT: Final = 20.0
"""% of a rack's power budget kept free for inrush, fan ramp and growth (a common DC design rule)."""

PSU_EFFICIENCY: Final = 0.94
"""Wall-to-DC efficiency of a node's power supplies (80 PLUS Titanium: >= 94 % at 20-100 % load on
230 V internal redundant supplies, per the 80 PLUS programme's Titanium criteria)."""

PLATFORM_W: Final[dict[GpuClass, float]] = {
    # DGX A100 system power is 6.5 kW max (NVIDIA DGX A100 User Guide, "System Specifications").
    # 6.5 kW x 0.94 PSU efficiency - 8 x 400 W GPUs = 2.9 kW for CPUs, memory, NVSwitch, NICs, fans.
    GpuClass.DENSE: 2900.0,
    # 8-GPU PCIe servers: 2 CPUs x 280 W, 16 DIMMs x 10 W, PCIe switches, NICs, drives, fans.
    # An estimate, not a datasheet figure: measure with `ipmitool dcmi power reading` and set
    # node_groups[].platform_w for the real chassis.
    GpuClass.DATACENTER: 1200.0,
    GpuClass.CONSUMER: 1200.0,
}
"""W drawn by a node apart from its GPUs (CPUs, memory, NICs, fans, switches), per GPU class."""

PDU_CONTINUOUS_DERATING: Final = 0.8
"""Fraction of a PDU feed's rating usable for continuous load (NEC 210.19/215.2: 80 % rule)."""

PDU_SOCKET_RATINGS_A: Final = (32, 63)
"""A; the IEC 60309 socket ratings the site's PDUs are built around."""

# --- cooling --------------------------------------------------------------------------------

DENSE_RACK_MIN_KW: Final = 40.0
"""kW; the smallest rack power budget that may hold dense (SXM/HGX) GPUs. An 8-GPU HGX node draws
~6.5 kW, so a legacy 10-15 kW room fits two at most and derates them."""

# --- observability --------------------------------------------------------------------------

HOT_RETENTION_DAYS: Final = 30
"""days Prometheus keeps metrics on local disk (the hot tier)."""

COLD_RETENTION_DAYS: Final = 365
"""days the remote-write cold tier keeps metrics."""

GPU_UTIL_LOW_PCT: Final = 30.0
"""% average GPU utilization below which a GPU is a tuning opportunity."""

GPU_UTIL_LOW_WINDOW_H: Final = 24
"""hours the utilization average runs over before the tuning alert fires."""

GPU_TEMP_INCIDENT_C: Final = 85.0
"""C; GPU core temperature above which an incident is raised."""

HBM_TEMP_INCIDENT_C: Final = 95.0
"""C; HBM temperature above which an incident is raised (A100/A800 SXM4 report Memory Max Operating Temp
95 C in `nvidia-smi -q -d TEMPERATURE`)."""

THERMAL_THROTTLE_PCT: Final = 10.0
"""% of the last 10 minutes a GPU may spend clocked down for heat before a warning."""

OVERHEAT_FOR_S: Final = 120
"""s a GPU or its HBM must stay over its incident temperature before it pages: a load spike passes, a cooling fault
stays."""

GROUP_WAIT_S: Final = 30
"""s Alertmanager waits after a group's first alert for others to send them together (its own default)."""

RULE_EVALUATION_INTERVAL_S: Final = 60
"""s between evaluations of every rule group: every alert here acts on minutes."""

# --- storage --------------------------------------------------------------------------------

HOT_CHECKPOINT_KEEP: Final = 3
"""checkpoints per run directory kept on the NFS hot tier for fast rollback."""

CHECKPOINT_INTERVAL_MINUTES: Final = 30
"""minutes of run time between a training job's checkpoints, as the site asks of its teams: every half-hourly mover
run (MOVER_SCHEDULE) then finds a new one, and a requeue loses at most half an hour of work."""

COLD_ARCHIVE_AFTER_DAYS: Final = 7
"""days after which a checkpoint moves from the NFS hot tier to the Ceph cold tier."""

HOT_FILL_ALERT_PCT: Final = 85.0
"""% full of an NFS hot server that warns: past ~90 % NFS servers slow down and one 300 GB dump fills them."""

HOT_WRITE_LATENCY_ALERT_MS: Final = 100
"""ms an NFS WRITE to the hot tier may take on average over STORAGE_LATENCY_WINDOW before StorageJitter warns. A
healthy server answers a 1 MiB WRITE over the cluster network in a few ms; at 100 ms a node's checkpoint stream of
8 writes in flight moves at most 80 MiB/s, and a 300 GB dump takes over an hour instead of minutes."""

MOVER_MAX_CHECKPOINT_GIB: Final = 2048
"""GiB (apparent size) above which the mover refuses a checkpoint: a 70B-parameter model with Adam state is about
1.1 TB (16 bytes per parameter), so twice that is no real checkpoint but a sparse file or a mistake."""

MOVER_MAX_RUN_GIB: Final = 8192
"""GiB one mover run may copy: about an hour of CephFS writes at 2 GB/s, so a run ends and the next one starts."""

MOVER_DEADLINE_MINUTES: Final = 120
"""minutes after which a mover run starts no further checkpoint; the CronJob and the epilog stop it 10 minutes
later, so a stuck run never blocks the next one for longer."""

MOVER_SCHEDULE: Final = "*/30 * * * *"
"""cron; every 30 minutes keeps at most half an hour of superseded checkpoints on the hot tier."""

NFS_MOUNT_ROOT: Final = "/mnt/ckpt-hot"
"""Slurm nodes mount each NFS hot server at <root>/<server>."""

CEPH_MOUNT_PATH: Final = "/mnt/ckpt-cold"
"""Slurm nodes mount the CephFS cold tier here."""

NVME_DISKS_PATH: Final = "/mnt/nvme-disks"
NVME_CACHE_PATH: Final = "/mnt/nvme-cache"
"""An NVMe filesystem of its own on every GPU node (the prefetch refuses one smaller than storage.nvme.cache_gib, so
it never fills the root disk)."""
NFS_EXPORT_ROOT: Final = "/exports"
NFS_MODELS_EXPORT: Final = "/exports/models"

INFERENCE_WAITING_PER_REPLICA: Final = 5
"""Requests waiting in a vLLM replica's queue at which the autoscaler adds one (the vllm-stack chart's default
KEDA threshold)."""
GATEWAY_TEAM_BUDGET_USD: Final = 1000.0
"""USD per budget period a team may spend through the LLM gateway unless its own budget is set."""
GATEWAY_CPU: Final = 2.0
GATEWAY_MEMORY_GIB: Final = 2.0
"""One LiteLLM proxy replica: a single process that used a full core at 152-169 requests/s and held ~268 MB RSS after
3,200 requests (../shared/notes/litellm-offline.md); twice both, for bursts and for the prometheus callback's series."""
DATABASE_CPU: Final = 1.0
DATABASE_MEMORY_GIB: Final = 2.0
"""One PostgreSQL instance of the gateway's database (keys, teams, budgets, spend logs: small rows, one writer)."""

# --- scheduling -----------------------------------------------------------------------------

PRIORITY_INFERENCE: Final = 10_000_000
PRIORITY_PRODUCTION: Final = 1_000_000
PRIORITY_STAGING: Final = 100_000
PRIORITY_DEV: Final = 1_000
"""Kubernetes PriorityClass values; user classes must stay below 1e9 (system classes start there)."""

QOS_CRITICAL: Final = 100_000
QOS_INFERENCE: Final = 50_000
QOS_TRAIN_HIGH: Final = 10_000
QOS_TRAIN_NORMAL: Final = 1_000
QOS_TRAIN_PREEMPTIBLE: Final = 100
"""Slurm QoS priorities; a decade apart, so PriorityWeightQOS outweighs fairshare between any two of them."""

PODS_READY_TIMEOUT_MINUTES: Final = 10
"""minutes an admitted Kueue workload has to get every pod ready before it is evicted and requeued: long enough
to pull a multi-GB image and load weights from NVMe, short enough that a half-placed gang frees its GPUs soon
(the Kueue docs' example uses 10m; its default is 5m)."""

TEAM_GPU_QUOTA: Final = 8
"""GPUs per Kueue flavor a team's jobs may hold on Kubernetes unless the spec says otherwise: one 8-GPU node's
worth, so no single team can take a whole inference pool."""

TEAM_FAIRSHARE: Final = 1
"""Slurm fairshare shares per team account (sacctmgr's default): every team counts the same."""

# --- rollout --------------------------------------------------------------------------------

PLATFORM_SOAK_DAYS: Final = 0
"""days the platform stage (no team) runs before canary may be requested: none by the calendar, since what holds the
canary is the passed acceptance campaign of this very deployment, whose soak alone is 168 h."""

CANARY_SOAK_DAYS: Final = 14
"""days the canary stage runs before half may be requested (weeks 1-2)."""

HALF_SOAK_DAYS: Final = 28
"""days the half stage runs before full may be requested (weeks 3-6)."""

CANARY_MAX_TEAMS: Final = 2
HALF_MAX_TEAMS: Final = 6

GATE_MAX_FIRING_CRITICAL: Final = 0
"""critical alerts that may be firing when a stage advances."""

GATE_MIN_GPU_UTIL_PCT: Final = 30.0
"""% fleet GPU utilization the current stage must reach before the next is requested."""

GATE_MAX_TRAIN_QUEUE_MINUTES: Final = 60.0
"""minutes; the p95 wait of a training job in the queue."""

GATE_MAX_INFERENCE_ERROR_PCT: Final = 1.0
"""% of inference requests answered with an error."""

GATE_WINDOW_MINUTES: Final = 60.0
"""minutes of history the utilization, queue-time and error-rate gates average over."""

APPROVALS_REQUIRED: Final = 2
"""distinct approvers (never the requester) a stage advance needs."""

APPROVAL_TTL_HOURS: Final = 24
"""hours an approval stays valid; after that the request must be approved again."""

# --- node validation ------------------------------------------------------------------------

MIN_DRIVER_VERSION: Final = "535.104.05"
"""Oldest NVIDIA driver a node may run: R535 is a long-term support branch that covers both A800
(Ampere) and RTX 4090 (Ada) (NVIDIA Data Center Driver release notes, R535)."""

GPU_DRIVER_VERSION: Final = "535.230.02"
"""NVIDIA driver the GPU Operator installs: the R535 long-term branch (NVIDIA Data Center Driver 535.230.02
release notes, 2025-01); Kubernetes and Slurm jobs both run on it."""

DRIVER_WAIT_S: Final = 1800
"""seconds a node check waits for the GPU Operator's driver on its node: the driver container builds and loads the
kernel modules first (minutes), after node-feature-discovery has labelled the node."""

DIAG_LEVEL: Final = 3
"""DCGM diagnostic level 3, "long hardware diagnostics" (dcgmi diag reference, docs.nvidia.com/datacenter/dcgm):
PCIe, memory, the GEMM diagnostic, targeted stress and power under a training job's load, with a verdict per test
and GPU. DCGM runs only level 1 on non-datacenter GPUs (RTX 4090): the node check caps them there."""

DIAG_TIMEOUT_S: Final = 3600
"""seconds a diagnostic may take before the node check stops it: level 3 normally lasts about 15 minutes (dcgmi diag
reference), four times that before a hung GPU fails the node."""

# --- cooling capacity per rack, by cooling type ---------------------------------------------

COOLING_MAX_KW: Final[dict[str, float]] = {
    # Upper bounds of heat one rack can shed with each method, as cooling vendors quote them
    # (Schneider Electric WP 55 and WP 265, Vertiv and Uptime Institute density surveys).
    # A rack claiming more than its method can remove is a typo or a wish, never a plan.
    "air": 15.0,
    "rear_door": 40.0,
    "in_row_chilled_water": 60.0,
    "direct_liquid": 120.0,
    "immersion": 200.0,
}
"""kW of heat one rack can remove, per cooling type."""

# --- Slurm ----------------------------------------------------------------------------------

SLURM_PACKAGE_SOURCE: Final = ("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                                "http://deb.debian.org/debian bookworm main")
"""The apt source Slurm and munge come from: Debian 12's own archive, which ships slurm-wlm 22.05. Its signed-by is
the one Debian 12's own debian.sources names: apt refuses to read any source when one archive has two ("Conflicting
values set for option Signed-By")."""
SLURM_PACKAGE_VERSION: Final = "22.05.8-4+deb12u3"
"""Debian 12's slurm-wlm as of this writing (`apt-cache policy slurmctld` on bookworm, main and bookworm-security)."""
SLURM_OLDEST_RELEASE: Final = (22, 5)
"""The oldest Slurm the site runs (the mission: Slurm 22+): configless slurmd, cgroup/v2 and the 22.05 slurm.conf
keys the rendered configuration uses."""

SLURM_OS_MEMORY_RESERVE_PCT: Final = 5.0
"""% of a node's memory kept out of RealMemory: the kernel's page map alone is ~1.6 % (64 B per 4 KiB
page), plus firmware holes, the OS, slurmd, the GPU driver's pinned buffers and the NFS page cache."""

SLURM_DEF_MEM_PER_GPU_GIB: Final = 96
"""GiB of host memory per allocated GPU when a job does not ask (--mem): 2 TiB less the reserve over 8
GPUs leaves room; without it a 1-GPU job would take the whole node's memory."""

SLURM_EXPORTER_PORT: Final = 9341
"""TCP port the Slurm exporter serves /metrics on, on the controller (chosen here; no Slurm daemon uses it)."""
SLURM_EXPORTER_INTERVAL_S: Final = 30
"""s between the exporter's polls of sinfo and sacct: Prometheus's scrape interval, so each scrape sees news."""
SLURMD_TIMEOUT_S: Final = 300
"""s slurmctld waits for a silent slurmd before it sets the node DOWN and requeues its jobs: slurm.conf(5)'s default
SlurmdTimeout, kept (a shorter one marks a node busy with a large checkpoint flush dead)."""
SLURM_PRIORITY_WEIGHT_QOS: Final = 100_000
SLURM_PRIORITY_WEIGHT_FAIRSHARE: Final = 10_000
"""Multifactor priority weights: QoS orders the queue first, fairshare orders jobs of one QoS."""

# --- lending the flex pool (components/site/lending.py) --------------------------------------
LEND_WAITING_PER_REPLICA: Final = 10.0
"""Requests waiting per serving vLLM replica at which inference is short of GPUs: twice the autoscaler's threshold
(INFERENCE_WAITING_PER_REPLICA), so queues the Kubernetes pool can still absorb by scaling never borrow Slurm's."""
RECLAIM_WAITING_PER_REPLICA: Final = 1.0
"""Requests waiting per replica under which the lent nodes are not needed (queues all but empty)."""
LEND_PEAK_S: Final = 300
"""s a peak must last before a lend: a burst the queues absorb in minutes is not worth requeueing training."""
RECLAIM_TROUGH_S: Final = 1800
"""s a trough must last before a reclaim: longer than the peak, since a reclaim evicts replicas that may be needed
again, while training loses only the wait."""
LEND_COOLDOWN_S: Final = 600
"""s after a move before the next: the moved capacity shows in the queues (KEDA's poll plus a vLLM start) first."""
LEND_MAX_STEP_NODES: Final = 1
"""Flex nodes one decision moves."""
TRAINING_FLOOR_NODES: Final = 1
"""Flex nodes Slurm always keeps."""
FLEX_QOS: Final = ("train_preemptible",)
"""The Slurm QoS the flex partitions admit: the one the inference class preempts in DEFAULT_CLASSES."""
LENDING_INTERVAL_S: Final = 30
"""s between decisions: Prometheus's scrape interval, so each decision sees news."""
LEND_WAIT_S: Final = 600
"""s a lend waits for the jobs inference does not preempt to leave a node before the lend is reported stuck."""
LENDING_METRICS_PORT: Final = 9342
"""TCP port of the lending controller's /metrics on the Slurm controller (beside the exporter's 9341)."""
FLAPPING_MOVES: Final = 4
"""Moves within FLAPPING_WINDOW_H hours that raise LendingFlapping: more than the hysteresis lets a real daily peak
and trough cause."""
FLAPPING_WINDOW_H: Final = 1

# --- the node health controller (components/site/health.py) -----------------------------------
HEALTH_DRAIN_XIDS: Final = (48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140)
"""XIDs that put a node under suspicion: those the Xid catalogue (docs.nvidia.com/deploy/xid-errors) resolves with a
GPU reset, a node reboot or a hardware check, not by restarting the application (13, 31, 43, 45 are the job's)."""
HEALTH_ECC_DBE_MAX: Final = 0
"""Double-bit ECC errors a GPU may have in one window: none. DCGM's health watch counts any DBE as a failure (DCGM
User Guide, "Health and Diagnostics": "ECC double bit errors" are DCGM_HEALTH_RESULT_FAIL)."""
HEALTH_NVLINK_ERRORS_MAX: Final = 100
"""NVLink CRC, replay and recovery errors a GPU may have in one window: a few CRC errors a minute are retried on a
healthy link (DCGM's NVLink health watch warns on a rising error rate, not on one error), a link failing makes
thousands."""
HEALTH_THERMAL_VIOLATION_PCT: Final = 50.0
"""% of the window a GPU may spend clocked down for heat (DCGM_FI_DEV_THERMAL_VIOLATION): more than half is a cooling
or paste fault, not a hot afternoon (the alert warns at alerting.thermal_throttle_pct already)."""
HEALTH_WINDOW_S: Final = 600
"""s over which counters are read (increase, rate): the alerts' COUNTER_WINDOW, 10 minutes."""
HEALTH_DIAG_LEVEL: Final = 3
"""dcgmi diag suite before a node returns: level 3, "long hardware diagnostics, normally lasting approximately 15
minutes" (dcgmi diag reference, docs.nvidia.com/datacenter/dcgm); DCGM's guide names a long administrator-led
validation as the step before returning a node to service (DCGM Diagnostics, "When diagnostics are useful")."""
HEALTH_MAX_DRAINED_PCT: Final = 10.0
"""% of the site's GPU nodes the controller may hold drained at once (rounded down): on 16 nodes, 1."""
HEALTH_FAILURES_BEFORE_HANDOFF: Final = 2
"""Failed diagnoses (or relapses after a return) within the failure window that hand a node to a human."""
HEALTH_FAILURE_WINDOW_H: Final = 168
"""hours a failure counts toward the hand-off: a week, so a node that fails once a month is diagnosed each time."""
HEALTH_STALE_AFTER_S: Final = 180
"""s after which a node's newest DCGM sample is too old to judge it: three of dcgm-exporter's default 30 s collection
intervals plus Prometheus's scrape (a missed scrape or two is not a dead exporter)."""
HEALTH_INTERVAL_S: Final = 60
"""s between two decisions: a minute, the alerts' evaluation interval."""
HEALTH_METRICS_PORT: Final = 9343
"""TCP port of the health controller's /metrics on the Slurm controller (beside the lending controller's 9342)."""
