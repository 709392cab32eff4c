"""The lending section of the site spec (`gpu-cluster:lending`): when the flex controller lends flex nodes to
Kubernetes inference and takes them back (components/scheduling/lending_decision.py decides; runbooks/flex/
controller.py acts; docs/scheduling.md, "The lending controller").

Demand is read from vLLM's `vllm:num_requests_waiting` per serving replica, from model servers pending and, with an
objective set, from the p95 time to first token; the thresholds, durations and steps here turn it into moves. Rules
across sections (the floor against the flex pool's size) are in components.site.rules.
"""

from typing import Annotated, Self

from pydantic import Field, model_validator

from components.site import defaults
from components.site.types import AbsolutePath, Float, Int, KubernetesUser, ListenAddress, Spec
from components.site.wellknown import PROMETHEUS_URL

# Compared with vLLM's queue gauge summed over replicas; ten thousand waiting per replica is past any engine.
WaitingPerReplica = Annotated[Float, Field(ge=0, le=10_000)]
# Seconds compared with time.time() differences and given to systemd and Prometheus as durations: a day at most.
Seconds = Annotated[Int, Field(gt=0, le=86_400)]


class Lending(Spec):
    lend_waiting_per_replica: Annotated[WaitingPerReplica, Field(gt=0)] = defaults.LEND_WAITING_PER_REPLICA
    """Requests waiting per serving replica (`vllm:num_requests_waiting`) at or over which inference is at a peak;
    a model server pending (a GPU pod of the inference path) is a peak too. Above every served model's
    waiting_per_replica, where its autoscaler adds a replica (rule lend-above-autoscaler, components.site.rules)."""
    reclaim_waiting_per_replica: WaitingPerReplica = defaults.RECLAIM_WAITING_PER_REPLICA
    """Requests waiting per replica at or under which (with no model server pending) inference is in a trough."""
    # Compared with a p95 of vLLM's time-to-first-token histogram in seconds; ten minutes is past any objective.
    ttft_objective_s: Annotated[Float, Field(gt=0, le=600)] | None = None
    """s; the serving objective for the p95 time to first token (vLLM's `vllm:time_to_first_token_seconds`, over
    the last components.inference.demand.LATENCY_WINDOW): over it inference is at a peak, and no trough is called
    while it is. None: the queues and pending pods decide alone."""
    peak_s: Seconds = defaults.LEND_PEAK_S
    """s a peak must last before the controller lends."""
    trough_s: Seconds = defaults.RECLAIM_TROUGH_S
    """s a trough must last before the controller reclaims; the lent models' replica floor drops as the trough starts,
    so the lent nodes empty first. A reclaim also waits while it and the next lend would reach flapping_moves within
    flapping_window_h (components/scheduling/lending_decision.py)."""
    # Compared with time.time() differences by decide(); 0 turns the cooldown off.
    cooldown_s: Annotated[Int, Field(ge=0, le=86_400)] = defaults.LEND_COOLDOWN_S
    """s after a move during which no other move starts."""
    # Slices decide()'s node list; a thousand flex nodes is past any site.
    max_step_nodes: Annotated[Int, Field(ge=1, le=1000)] = defaults.LEND_MAX_STEP_NODES
    """Flex nodes one decision lends or reclaims, at most."""
    # Compared with the flex pool's node count (components.site.rules.check_training_floor).
    training_floor_nodes: Annotated[Int, Field(ge=0, le=1000)] = defaults.TRAINING_FLOOR_NODES
    """Flex nodes Slurm always keeps: the controller never lends the pool below it."""
    interval_s: Seconds = defaults.LENDING_INTERVAL_S
    """s between two decisions; also Prometheus's scrape interval of the controller, and how long one lend waits for
    a node to empty before later decisions finish it."""
    lend_wait_s: Seconds = defaults.LEND_WAIT_S
    """s a lend may wait for jobs it may not requeue to leave a node; past it LendNotCompleted fires."""
    # The alert's PromQL threshold; one move is no flapping.
    flapping_moves: Annotated[Int, Field(ge=2, le=1000)] = defaults.FLAPPING_MOVES
    """Moves within flapping_window_h that raise LendingFlapping; the controller holds a reclaim that, with the next
    lend, would reach it."""
    # The alert's PromQL range `[<h>h]`: a day at most.
    flapping_window_h: Annotated[Int, Field(ge=1, le=24)] = defaults.FLAPPING_WINDOW_H
    """hours over which LendingFlapping counts moves."""
    # A TCP port in the unit's command line and Prometheus's static target.
    metrics_port: Annotated[Int, Field(gt=0, lt=65536)] = defaults.LENDING_METRICS_PORT
    """TCP port of the controller's /metrics on the Slurm controller; Prometheus scrapes it."""
    metrics_address: ListenAddress = "127.0.0.1"
    """The address the controller's /metrics binds to on the Slurm controller (one interface, never all): loopback
    by default, where only that host reaches it. The stack's Prometheus scrapes slurm.controller_host at
    metrics_port, so a site sets the address that name resolves to; until then LendingControllerDown fires. At most
    hosts.slurm_exporter.METRICS_MAX_CONNECTIONS connections at once, each closed after LISTENER_TIMEOUT_S of
    silence."""
    prometheus_url: Annotated[str, Field(pattern=r"^https?://\S+[^/]$")] = PROMETHEUS_URL
    """Prometheus the controller reads demand from, as the Slurm controller reaches it (example host: set it)."""
    project_dir: AbsolutePath = "/opt/gpu-cluster"
    """Where the stack installs this project's code and the stack file on the Slurm controller (releases/<digest>,
    `current` the one running): the controller runs gpuctl flex's lend and reclaim and reads the site from there."""
    package_index: Annotated[str, Field(pattern=r"^(https?|file)://\S+$")] = "https://pypi.org/simple"
    """The package index (PEP 503) the Slurm controller installs the project's pinned dependencies from: PyPI, or the
    site's mirror of it where the controller has no internet."""
    kubeconfig: AbsolutePath = "/etc/gpucluster/flex-controller.kubeconfig"
    """kubectl's credentials on the Slurm controller: an identity that may label, cordon, drain and uncordon the flex
    nodes and patch the inference namespace's ScaledObjects (the lent models' replica floor; the platform team
    provides it; never in the stack file). It authenticates as kubernetes_user."""
    kubernetes_user: KubernetesUser = "gpucluster-flex-controller"
    """The Kubernetes user kubeconfig authenticates as. The stack binds it to what the controller's kubectl calls do,
    no more (components/scheduling/controller_access.py): get, list and patch of the flex nodes (label, cordon,
    uncordon, drain), list and get of pods, create of pods/eviction and get of DaemonSets (drain), and get and patch
    of the lent models' ScaledObjects in the inference namespace."""
    state_dir: AbsolutePath = "/var/lib/gpucluster/flex"
    """Where the controller keeps its lock, its last decision, the pause switch and its audit log."""

    @model_validator(mode="after")
    def _hysteresis(self) -> Self:
        if self.reclaim_waiting_per_replica >= self.lend_waiting_per_replica:
            raise ValueError(f"reclaim_waiting_per_replica ({self.reclaim_waiting_per_replica:g}) must be under "
                             f"lend_waiting_per_replica ({self.lend_waiting_per_replica:g}), or one queue length "
                             "would both lend and reclaim")
        return self
