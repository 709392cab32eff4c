"""The acceptance campaign, scaled by its time_scale (0.01: a 1000 s hold is 10 s), against real daemons: a real
Prometheus evaluating the stack's rules (each `for:` scaled alike) and a real Alertmanager whose API the campaign
reads, two GPU nodes' daemons each inside a network namespace this test makes (tests/harness/netns.py), the other
nodes' exporters on 127.0.0.1, and the real LiteLLM gateway running the config the plan wrote, unmodified, in its own
namespace where the served model's Service name reaches its test double (tests/harness/gateway.py).

Drills: the partition takes node A's link down inside its namespace (DcgmExporterDown must fire for that node and
clear); the node failure kills node B's exporter, its slurmd on the loopback Slurm cluster and its jobs as power loss
does (the same alert, for node B; Slurm must mark it DOWN and requeue its job); storage jitter puts
a tbf qdisc on node A's link (this kernel has no sch_netem). The storage load writes its checkpoints from node A, as
production's does from the jitter drill's node: each chunk's connection made inside node A's namespace, over its link,
to the hot tier's server on the host side, which serves the platform's share the training jobs write their dumps to;
the hot swap moves the model's service to a new version under the inference load.

The campaign runs first in a child process, killed (SIGKILL) while the partition holds; the node's own dead-man's
switch reverts the partition at its deadline; the resumed campaign logs the fault it found and runs to its verdict.

The lending controller runs throughout, as the service beside slurmctld does in production: the real `gpuctl flex
control` against the loopback Slurm cluster, kubectl faked at its command line (the flex label kept per node), reading
demand through a real Prometheus. The model server doubles answer at once and queue nothing, so the demand served is
the queue the rate they are asked would leave in a pool sized for the peak (tests/harness/demand.py ServedDemand):
nothing waits under the drills' load, and at the shock's 3x the controller sees a peak and lends a flex node, whose
preemptible training (the campaign's, on every flex node at each step's start) the lend requeues; the campaign reads
its /metrics and the verdict finds the lend, the requeue on the flex node (sacct) and inference served in the shock.
"""

import http.client
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from components.monitoring.alerts import lending_stale_s
from components.scheduling.preemption import team_qos
from components.site.lending import Lending
from components.site.site import Pool, Site
from components.site.wellknown import PLATFORM_ACCOUNT
from runbooks.acceptance.alerts import firing_alerts
from runbooks.acceptance.campaign import CampaignRunner, Load, Target
from runbooks.acceptance.faults import Fault, Switches, link_down, run_commands, storage_delay, version_swap
from runbooks.acceptance.lending import ControllerSampler, UnreadableError, http_text, parse
from runbooks.acceptance.load import (
    Checkpoints,
    FlexTraining,
    PrometheusSampler,
    QueueWaitSampler,
    TrainingJob,
    inference_load,
    job_states,
    storage_load,
    training_load,
)
from runbooks.acceptance.probes import HotSwapProbe, NodeDaemonProbe, SlurmNodeProbe, StorageJitterProbe, jobs_on
from runbooks.acceptance.report import write_report
from runbooks.acceptance.store import PASSED, CampaignStore
from runbooks.acceptance.verdict import Criterion, Measurements, judge
from runbooks.flex.lending import flex_nodes
from runbooks.stack.audit import AuditLog, audit_key
from runbooks.stack.lock import StackLock
from tests.builders import copy_project, prod_values, with_changes
from tests.builders import parse as parse_site
from tests.harness import netns
from tests.harness.alerting import ALERTMANAGER, AlertingWorld, scaled_rules
from tests.harness.daemons import PROMETHEUS, PrometheusServer, free_ports, stop_all, wait_for
from tests.harness.demand import ServedDemand, serve_demand
from tests.harness.figures import FIGURES
from tests.harness.gateway import LITELLM, Backend, EngineService, plan_gateway, running_gateway
from tests.harness.slurm_cluster import Cluster, slurm_marks
from tests.harness.switches import disarmed
from tests.integration.test_flex_controller import SCALED

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "tests" / "harness" / "node_agent.py"
POWER = REPO / "tests" / "harness" / "loopback_power.py"
SCALE = 0.01
# The platform account's key and account, as in production: the campaign runs before any team is onboarded.
KEY, ACCOUNT, MODEL = "sk-acceptance-test", PLATFORM_ACCOUNT, "qwen2-5-72b"
CHUNK = 1 << 20
"""Bytes per checkpoint chunk: checkpoint_gib 1 at the scale, in 1 MiB writes."""
AGENT_PORT = 9400
DELAY_MS = 300
TRAINING_JOB_S = 20
"""s each training job of the load runs (--requeue, every third a two-node gang). The shock's lend drains its flex node
and then reads the jobs running there: a flex job ending in between leaves the node idle and its pinned successor
pending, so the lend requeues nothing (1 run in 10 with 8 s jobs). The longer the jobs, the rarer that; the killed
run's flex jobs (two a node) must still have ended before the resumed run's shock, some 100 s after them."""
PINNED = "acceptance-pinned"
"""The job name of the long job pinned to node B, whose requeue the node failure causes."""
SLURMD_TIMEOUT_S = 5
"""s the test cluster's slurmctld gives a silent slurmd before the node is DOWN (the prod default 300, about scaled)."""
SHOCK_MINUTES = 25
"""The shock, 15 s at the scale: the controller sees the peak some 3 s in (its 2 s window of arrivals, a 1 s scrape),
lends after its peak_s and its next decision (2 s each), and the lend's requeue takes 3 s (tests/integration/
test_flex.py): the lend must be done, and seen at a look, before the shock ends."""
ACCEPTANCE: dict[str, Any] = {
    "time_scale": SCALE, "soak_h": 1, "shock_minutes": SHOCK_MINUTES, "peak_source": "declared", "checkpoint_gib": 1,
    "peak": {"training_jobs_per_h": 360, "inference_rps": 2, "storage_write_mib_s": 3},
    "drills": [
        {"kind": "network_partition", "sop": "network-partition", "alert": "DcgmExporterDown", "hold_s": 1500,
         "detect_within_s": 1500, "recover_within_s": 800, "revert_after_s": 1600},
        # Held 40 s: slurmctld shows a silent slurmd NOT_RESPONDING after a ping times out (MessageTimeout 10 s)
        # and DOWN, requeueing its jobs, some 26 s after the power loss with SlurmdTimeout 5 s (measured here).
        {"kind": "node_failure", "sop": "node-power-loss", "alert": "DcgmExporterDown", "hold_s": 4000,
         "detect_within_s": 1500, "recover_within_s": 800, "revert_after_s": 4500},
        {"kind": "storage_jitter", "sop": "storage-jitter", "hold_s": 400, "detect_within_s": 400,
         "recover_within_s": 400, "revert_after_s": 1500, "delay_ms": DELAY_MS},
        {"kind": "model_hot_swap", "sop": "model-hot-swap", "hold_s": 400, "detect_within_s": 400,
         "recover_within_s": 400, "revert_after_s": 1500},
    ]}
"""The test site's campaign: this machine's peak (declared), a one-hour soak and a SHOCK_MINUTES shock, the drills'
alerts as this world raises them (node B's exporter is all of its daemons here)."""
LENDING = {**SCALED, "interval_s": 2, "peak_s": 1}
"""The flex tests' lending settings in seconds, deciding every 2 s (down after 10 s without a decision), lending on a
peak seen at two decisions."""

pytestmark = [*slurm_marks(), pytest.mark.skipif(
    bool(netns.missing() or not PROMETHEUS or not ALERTMANAGER or not LITELLM.exists()),
    reason=f"{netns.missing() or 'needs prometheus, prometheus-alertmanager and the LiteLLM venv (make test)'}")]


@dataclass
class World:
    """Everything the campaign's targets and loads need, as JSON: the killed child process builds the same."""

    node_a: str
    node_b: str
    ns_a: str
    ns_b: str
    link_a: str
    address_a: str
    address_b: str
    pid_file_b: str
    agent_b: list[str]
    gateway: str
    service: str
    old_backend: str
    new_backend: str
    alertmanager: str
    prometheus: str
    slurm_conf: str = ""
    """The loopback Slurm cluster the training load submits to (tests/harness/slurm_cluster.py)."""
    slurmd_pid_file_b: str = ""
    """Node B's slurmd there: the node failure kills it with node B's other daemons and its jobs."""
    lending_metrics: str = ""
    """The running lending controller's /metrics (the lending_controller fixture)."""
    hot_dir: str = ""
    """The platform's share on the hot tier as the test cluster's nodes mount it (<mount_root>/<server>/platform/...):
    where the training jobs write their checkpoints."""
    hot_tier: str = ""
    """The hot tier's server on the host side of node A's link, serving hot_dir: where node A's checkpoint writes go."""


def acceptance_site() -> Site:
    return parse_site(with_changes(prod_values(), acceptance=ACCEPTANCE, slurm__slurmd_timeout_s=SLURMD_TIMEOUT_S,
                                   monitoring__rule_evaluation_interval_s=1))


@dataclass(frozen=True)
class NodeATier:
    """The hot tier as node A reaches it: each chunk PUT (and read back) over a connection made inside node A's
    namespace, so it crosses node A's link, the storage path the jitter drill delays, as production's dd on the node
    crosses its NFS mount's link (runbooks.acceptance.load.NodeTier). One connection per chunk, made in this process:
    a process per chunk (curl under nsenter) cost this 2-core machine the shock's p99 (0.895 s over 0.889 s allowed)."""

    namespace: str
    url: str
    """The hot tier's server, http://<host side>:<port>/hot."""

    def _exchange(self, method: str, name: str, data: bytes | None) -> bytes:
        where = urlsplit(self.url)
        with netns.entered(self.namespace):
            connection = http.client.HTTPConnection(where.hostname or "", where.port, timeout=30)
            connection.connect()
        try:
            connection.request(method, f"{where.path}/{name}", body=data)
            answer = connection.getresponse()
            body = answer.read()
        finally:
            connection.close()
        if answer.status not in (200, 201):
            raise OSError(f"{method} {self.url}/{name}: HTTP {answer.status}")
        return body

    def put(self, name: str, data: bytes, drop: Sequence[str] = ()) -> None:
        for old in drop:
            self._exchange("DELETE", old, None)
        self._exchange("PUT", name, data)

    def get(self, name: str) -> bytes:
        return self._exchange("GET", name, None)


def jitter(world: World) -> Fault:
    """The storage-jitter drill's fault on node A's link. tbf stands in for netem here (the kernel has no sch_netem):
    node A sends a chunk at this rate in ~3x the drill's delay."""
    rate_kbit = int(CHUNK * 8 / (3 * DELAY_MS / 1000) / 1000)
    return storage_delay("storage_jitter", world.link_a,
                         ("tbf", "rate", f"{rate_kbit}kbit", "burst", "32kbit", "latency", "5s"), world.ns_a)


def build(world: World, state: Path) -> tuple[CampaignRunner, CampaignStore, list[Load]]:
    site = acceptance_site()
    spec = site.acceptance
    checkpoints = Checkpoints()
    inference = inference_load(world.gateway, KEY, MODEL, spec.peak.inference_rps, spec.max_inference_rps)
    tier = NodeATier(world.ns_a, world.hot_tier)
    storage = storage_load(tier, CHUNK, spec.peak.storage_write_mib_s, spec.max_storage_write_mib_s,
                           checkpoints)
    flex = flex_nodes(site)
    curl = ("curl", "-fsS", "-X", "PUT", "--data")
    slurm = {"SLURM_CONF": world.slurm_conf}
    targets = {
        "network_partition": Target(link_down("network_partition", world.link_a, world.ns_a),
                                    NodeDaemonProbe(f"http://{world.address_a}:{AGENT_PORT}/metrics"),
                                    {"Hostname": world.node_a}),
        # Power loss: node B's exporter, slurmd and jobs killed at once; power on starts the daemons, and the node,
        # DOWN in Slurm, is resumed (as targets.py's BMC undo does).
        "node_failure": Target(Fault(
            "node_failure", world.node_b,
            (("pkill", "--signal", "KILL", "-F", world.pid_file_b),
             (sys.executable, str(POWER), world.node_b, world.slurmd_pid_file_b)),
            (("setsid", "-f", *world.agent_b), ("setsid", "-f", "slurmd", "-D", "-N", world.node_b),
             ("scontrol", "update", f"nodename={world.node_b}", "state=resume")), slurm),
            SlurmNodeProbe(world.node_b, ("squeue",), ("scontrol",), slurm, lambda: jobs_on(world.node_b, env=slurm)),
            {"Hostname": world.node_b}),
        "storage_jitter": Target(jitter(world), StorageJitterProbe(storage, DELAY_MS / 1000, tier, checkpoints)),
        "model_hot_swap": Target(version_swap("model_hot_swap", f"{MODEL} service",
                                              (*curl, world.new_backend, f"{world.service}/_endpoint"),
                                              (*curl, world.old_backend, f"{world.service}/_endpoint")),
                                 HotSwapProbe(inference, 2, spec.inference_error_pct)),
    }
    store = CampaignStore(state / "acceptance.sqlite")
    rollout_state = state / "rollout"
    key = audit_key(rollout_state)
    # The checkpoint dump at the scale (checkpoint_gib x time_scale), to the platform's hot share as nodes mount it.
    job = TrainingJob.for_site(site, TRAINING_JOB_S, Path(world.hot_dir),
                               int(spec.checkpoint_gib * (1 << 30) * spec.time_scale))
    training = training_load(("sbatch", "--chdir=/tmp", "--output=/dev/null"), slurm,
                             [ACCOUNT], team_qos(site), job, 2, spec.peak.training_jobs_per_h, spec.max_training_jobs)
    # Preemptible training on both flex nodes throughout, as the production campaign runs it.
    flex_training = FlexTraining(("sbatch", "--chdir=/tmp", "--output=/dev/null"), ("squeue",), slurm, ACCOUNT,
                                 site.slurm.flex_qos[0], TrainingJob.for_site(
                                     site, TRAINING_JOB_S, job.hot_dir, job.checkpoint_bytes, Pool.FLEX), flex,
                                 spec.max_training_jobs)
    loads: list[Load] = [inference, storage, training, flex_training, QueueWaitSampler(("squeue",), slurm),
                         PrometheusSampler("gpu_util_pct", world.prometheus, "avg(DCGM_FI_DEV_GPU_UTIL)"),
                         ControllerSampler(world.lending_metrics, lending_stale_s(Lending.model_validate(LENDING)),
                                           http_text(world.lending_metrics), tuple(flex))]
    runner = CampaignRunner(spec, store, AuditLog(state / "failures.jsonl", key),
                      AuditLog(rollout_state / "audit.jsonl", key), Switches(state / "switches"), REPO / "docs" / "sop",
                      lambda: firing_alerts(world.alertmanager), {d.kind: targets[d.kind] for d in spec.drills},
                      loads, StackLock(state / "campaign.lock", "gpuctl acceptance"), job_states(("sacct",), slurm))
    return runner, store, loads


def main(world_file: str, state: str) -> None:
    """The child process: run the campaign (it is killed mid-partition)."""
    runner, _, _ = build(World(**json.loads(Path(world_file).read_text())), Path(state))
    runner.run("sha256:deployed", "platform")


def agent(*hosts: str, listen: str, directory: Path, gpus: int, pid_file: Path | None = None) -> list[str]:
    return [sys.executable, str(AGENT), "--listen", listen, "--directory", str(directory), "--gpus", str(gpus),
            *(["--pid-file", str(pid_file)] if pid_file else []), *hosts]


@pytest.fixture(scope="module")
def model_servers() -> Iterator[tuple[Backend, Backend]]:
    """The served model's two versions (the hot swap moves its Service from the first to the second); the lending
    controller's demand counts what they serve."""
    old, new = Backend("v1"), Backend("v2")
    try:
        yield old, new
    finally:
        old.stop()
        new.stop()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, cluster: Cluster,
          model_servers: tuple[Backend, Backend]) -> Iterator[World]:
    site = acceptance_site()
    root = tmp_path_factory.mktemp("acceptance")
    hot = cluster.stack.hot_root / cluster.site.storage.nfs_hot.servers[0] / ACCOUNT / "acceptance"
    hot.mkdir(parents=True, exist_ok=True)
    groups = [(g, [n.name for n in g.nodes]) for g in site.node_groups]
    node_a, node_b = groups[0][1][0], groups[0][1][1]
    old, new = model_servers
    # The served model's Service as the plan renders it: the hot swap moves its endpoint (PUT /_endpoint).
    planned = plan_gateway(root / "plan")
    background: list[subprocess.Popen[bytes]] = []
    pid_file_b = root / "agent-b.pid"
    with netns.namespace() as ns_a, netns.namespace() as ns_b, \
            running_gateway(planned, root, {KEY: ACCOUNT}) as gateway:
        service = EngineService(gateway.engine_address, [old.url])
        try:
            for directory in (root / "hot-a", root / "hot-b"):
                directory.mkdir()
            ns_a.start(*agent(node_a, listen=f"{ns_a.node_address}:{AGENT_PORT}", directory=root / "hot-a",
                              gpus=groups[0][0].gpus_per_node), log=str(root / "agent-a.log"))
            agent_b = ["ip", "netns", "exec", ns_b.name,
                       *agent(node_b, listen=f"{ns_b.node_address}:{AGENT_PORT}", directory=root / "hot-b",
                              gpus=groups[0][0].gpus_per_node, pid_file=pid_file_b)]
            background.append(subprocess.Popen(agent_b, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
            (hot_port,) = free_ports(1)
            background.append(subprocess.Popen(agent(listen=f"{ns_a.host_address}:{hot_port}", directory=hot, gpus=0),
                                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
            targets = [f"{ns_a.node_address}:{AGENT_PORT}", f"{ns_b.node_address}:{AGENT_PORT}"]
            for group, names in groups:
                others = [n for n in names if n not in (node_a, node_b)]
                if others:
                    (port,) = free_ports(1)
                    background.append(subprocess.Popen(agent(*others, listen=f"127.0.0.1:{port}", directory=root,
                                                             gpus=group.gpus_per_node), stdout=subprocess.DEVNULL))
                    targets.append(f"127.0.0.1:{port}")
            alerting = AlertingWorld(root / "alerting", targets, scaled_rules(site, SCALE))
            try:
                alerting.wait_ready()
                wait_for("node B's agent", lambda: pid_file_b.exists(), 10)
                hot_tier = f"http://{ns_a.host_address}:{hot_port}/hot"
                wait_for("the hot tier's server", lambda: subprocess.run(
                    ["curl", "-s", "-o", "/dev/null", f"{hot_tier}/none"], timeout=10, check=False).returncode == 0, 10)
                yield World(node_a, node_b, ns_a.name, ns_b.name, ns_a.node_link, ns_a.node_address,
                            ns_b.node_address, str(pid_file_b), agent_b, gateway.url, service.url, old.url, new.url,
                            alerting.alertmanager_url, alerting.prometheus_url, hot_dir=str(hot), hot_tier=hot_tier)
            finally:
                alerting.stop()
        finally:
            if pid_file_b.exists():
                # The drill's undo restarted node B's agent detached: stop it by the PID it wrote.
                subprocess.run(["pkill", "-F", str(pid_file_b)], check=False, timeout=10)
            for process in background:
                if process.poll() is None:
                    process.terminate()
                    process.wait(timeout=10)
            service.stop()


def link_state(ns: str, link: str) -> str:
    done = subprocess.run(["ip", "netns", "exec", ns, "cat", f"/sys/class/net/{link}/operstate"],
                          capture_output=True, text=True, timeout=10, check=True)
    return done.stdout.strip()


@pytest.fixture
def acceptance_slurm(slurm: Cluster, world: World) -> Iterator[Cluster]:
    """The session cluster with the acceptance site's SlurmdTimeout and a long training job on node B (the node
    failure's requeue needs one there); node B's slurmd, started again by the drill's undo, is the cluster's again
    after, and the prod settings are back."""
    slurm.reconfigure(acceptance=ACCEPTANCE, slurm__slurmd_timeout_s=SLURMD_TIMEOUT_S)
    try:
        slurm.sbatch("-A", ACCOUNT, "--qos=train_normal", "-w", world.node_b, "-p", "a800-train", "--requeue",
                     f"--job-name={PINNED}", "--wrap", "sleep 600")
        yield slurm
    finally:
        slurm.reconfigure()
        slurm.adopt_slurmd(world.node_b)
        slurm.run("scontrol", "update", f"nodename={world.node_b}", "state=resume", check=False)


@pytest.fixture
def lending_controller(acceptance_slurm: Cluster, model_servers: tuple[Backend, Backend], tmp_path: Path
                       ) -> Iterator[str]:
    """`gpuctl flex control` running for the campaign, live, on the flex tests' world (kubectl faked at its command
    line, keeping each node's flex label as a file; demand through a real Prometheus from the rate the model servers
    serve); its /metrics URL, once it has decided. The flex nodes go back to Slurm after."""
    for directory in ("demand", "flex-project", "bin", "labels"):
        (tmp_path / directory).mkdir()
    served = ServedDemand([lambda: model_servers[0].served, lambda: model_servers[1].served],
                          acceptance_site().acceptance.peak.inference_rps)
    demand = PrometheusServer(tmp_path / "demand", [
        {"job_name": "demand", "static_configs": [{"targets": [f"127.0.0.1:{serve_demand(served)}"]}]}])
    bin_dir = tmp_path / "bin"
    # `kubectl label node <node> <label>=true` / `<label>-` and `kubectl get nodes --selector ... --output name`, as
    # runbooks/flex/lending.py calls them; every other call (uncordon, drain, patch) succeeds with no output.
    (bin_dir / "kubectl").write_text(f"""#!/bin/sh
labels={tmp_path / "labels"}
case "$1 $2" in
"label node") case "$4" in *=true) : > "$labels/$3" ;; *-) rm -f "$labels/$3" ;; esac ;;
"get nodes") for lent in "$labels"/*; do [ -e "$lent" ] && echo "node/${{lent##*/}}"; done ;;
esac
exit 0
""")
    (bin_dir / "kubectl").chmod(0o755)
    project = copy_project(tmp_path / "flex-project", lambda config: config["gpu-cluster:lending"].update(
                               {**LENDING, "prometheus_url": demand.url}))
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}/metrics"
    controller = subprocess.Popen(
        [str(Path(sys.executable).parent / "gpuctl"), "flex", "--project-dir", str(project), "control", "--listen",
         "127.0.0.1", "--port", str(port), "--state-dir", str(tmp_path / "flex")],
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
             "SLURM_CONF": str(acceptance_slurm.conf_dir / "slurm.conf")},
        stdout=(tmp_path / "flex-control.log").open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        demand.wait_ready()

        def decided() -> bool:
            assert controller.poll() is None, (tmp_path / "flex-control.log").read_text()[-2000:]
            try:
                return parse(http_text(url)())["last_decision"] > 0
            except UnreadableError:
                return False

        wait_for("the lending controller's first decision", decided, 60, interval_s=0.5)
        yield url
    finally:
        stop_all([controller])
        demand.stop()
        # A node lent at the shock is not reclaimed before the campaign ends: Slurm's again for the next test.
        for node in flex_nodes(acceptance_slurm.site):
            acceptance_slurm.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)


def test_should_pass_the_scaled_campaign_after_a_kill_mid_partition_leaving_no_fault(
        world: World, acceptance_slurm: Cluster, lending_controller: str, tmp_path: Path) -> None:
    slurm = acceptance_slurm
    world = replace(world, slurm_conf=str(slurm.conf_dir / "slurm.conf"),
                    slurmd_pid_file_b=str(slurm.slurmd_pid_file(world.node_b)), lending_metrics=lending_controller)
    state = tmp_path / "state"
    (tmp_path / "world.json").write_text(json.dumps(asdict(world)))
    child = subprocess.Popen([sys.executable, "-c", f"from tests.integration.test_acceptance import main; "
                              f"main({str(tmp_path / 'world.json')!r}, {str(state)!r})"],
                             cwd=REPO, stdout=(tmp_path / "child.log").open("wb"), stderr=subprocess.STDOUT)
    try:
        def partition_in_place() -> bool:
            assert child.poll() is None, (tmp_path / "child.log").read_text()[-3000:]
            if not (state / "acceptance.sqlite").exists():
                return False
            try:
                with sqlite3.connect(state / "acceptance.sqlite") as db:
                    rows = db.execute("SELECT count(*) FROM faults WHERE drill = 'network_partition'").fetchone()
            except sqlite3.OperationalError:
                return False  # the child has not made its tables yet
            return bool(rows[0]) and link_state(world.ns_a, world.link_a) != "up"

        wait_for("the partition to be injected", partition_in_place, 30, interval_s=0.2)
        killed_at = time.time()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    assert link_state(world.ns_a, world.link_a) != "up", "the partition must outlive the killed campaign"
    # No run comes back in time: the node's own switch reverts the partition at its deadline (revert_after_s scaled).
    armed = next((state / "switches").glob("*network_partition-*.json"))
    assert Switches.wait_gone(str(armed), timeout_s=30)
    reverted_after = time.time() - killed_at
    assert link_state(world.ns_a, world.link_a) == "up"
    fired = Switches.fired(str(armed))
    assert fired is not None and fired["results"][0]["rc"] == 0

    runner, store, _ = build(world, state)
    started = time.monotonic()
    try:
        campaign = runner.run("sha256:deployed", "platform")
    finally:
        # Whatever happened, no switch of this campaign may fire after the test cluster is gone (issue 36 saw one
        # start a stray slurmd against a deleted configuration); a passed campaign leaves none armed (asserted below).
        left_armed = sorted(p.name for p in (state / "switches").glob("*.json"))
        left_watching = disarmed(state / "switches")
    took = time.monotonic() - started
    assert (left_armed, left_watching) == ([], []), "a dead-man's switch outlived its drill"
    report = write_report(store, campaign, tmp_path / "report")

    failures = store.failures(campaign.id)
    left = [f for f in failures if f.detail.get("left_by")]
    assert [(f.mode, f.sop) for f in left] == [("network_partition", "network-partition")]
    assert all(f.reverted_at is not None for f in store.faults(campaign.id)), "a fault is still in place"
    assert link_state(world.ns_a, world.link_a) == "up" and "tbf" not in netns_qdisc(world)
    steps = store.steps(campaign.id)
    drills = {k: v[2] for k, v in steps.items() if k.startswith("drill:")}
    assert campaign.verdict == PASSED, json.dumps([campaign.reason, drills, [f.__dict__ for f in failures]], indent=1)
    lending = next(c for c in steps["verdict"][2]["criteria"] if c["name"] == "lending controller")
    assert lending["passed"] and "decisions: hold/" in lending["measured"], lending
    # The shock's peak: the controller lent a flex node within it, the preemptible training there yielded (requeued,
    # as sacct accounts it) and inference was served.
    yielded = next(c for c in steps["verdict"][2]["criteria"] if c["name"] == "training yields to inference")
    assert yielded["passed"] and any(f" requeued on {node} at " in yielded["measured"]
                                     for node in flex_nodes(slurm.site)), yielded
    # The jobs ran on GPUs Slurm allocated through GRES, and wrote their dumps to the platform's hot share.
    gpu = next(c for c in steps["verdict"][2]["criteria"] if c["name"] == "training GPU-seconds")
    assert gpu["passed"], gpu
    # Node A's checkpoint chunks landed in the share the training jobs wrote their dumps to (each job removes its own).
    assert list(Path(world.hot_dir).glob("ckpt-*")), "the storage load wrote nowhere the training jobs write"
    fired_alerts = {f.mode for f in failures if f.source == "fired"}
    assert "DcgmExporterDown" in fired_alerts and all(f.sop for f in failures)
    assert drills["drill:model_hot_swap"]["reactions"][0]["ok"]
    # Slurm's side of the power loss, on the real cluster: node B DOWN, the job pinned there requeued, none lost.
    node_failure = drills["drill:node_failure"]
    assert [(r["name"], r["ok"]) for r in node_failure["reactions"]] == [
        ("node marked down", True), ("training requeued, none lost", True)], node_failure["reactions"]
    # The requeue as the verdict reads one, from the real sacct's records of every run (-D): the pinned job's first
    # run ended when node B lost power, inside that drill.
    pinned = slurm.run("sacct", "-X", "-n", "-P", "--format=JobID", f"--name={PINNED}", "-S", "now-1hour"
                       ).stdout.split()[-1]
    requeued = job_states(("sacct",), {"SLURM_CONF": world.slurm_conf})([pinned])[pinned].requeues
    failure_window = (node_failure["injected_at"], node_failure["reverted_at"])
    assert len(requeued) == 1 and failure_window[0] <= requeued[0][0] <= failure_window[1] + 5, (requeued,
                                                                                               failure_window)
    samples = store.samples(campaign.id)
    submitted = len(samples["training_error"])
    assert submitted and not any(v for _, v in samples["training_error"]), "sbatch refused the job mix"
    assert samples.get("training_queue_wait_s"), "no training job of the mix started"
    assert (tmp_path / "report" / "report.png").stat().st_size > 10_000
    # The passed campaign is in the rollout's audit log, bound to the deployment it judged.
    records = [json.loads(line) for line in (state / "rollout" / "audit.jsonl").read_text().splitlines()]
    assert [(r["what"], r["plan_digest"]) for r in records] == [("acceptance.campaign", "sha256:deployed")]
    FIGURES.append(f"acceptance campaign (time scale {SCALE:g}) resumed after a kill mid-partition: the node's "
                   f"switch reverted the partition {reverted_after:.1f} s after the kill; the resumed run took "
                   f"{took:.1f} s ({submitted} training jobs submitted after the kill): " + "; ".join(
                       f"{k[6:]} detected {v['detection_s']} s, recovered {v['recovery_s']} s"
                       for k, v in drills.items()) + f"; Slurm saw node B silent after {node_failure['measured_s']} s "
                   f"(SlurmdTimeout {SLURMD_TIMEOUT_S} s), {node_failure['reactions'][0]['detail']}: "
                   f"{node_failure['reactions'][1]['detail']}; "
                   f"failures logged: {len(failures)}; report {report}; the verdict measured: " + "; ".join(
                       f"{c['phase']} {c['name']} {c['measured']}" for c in steps["verdict"][2]["criteria"]
                       if not c["name"].startswith("drill:")))


def netns_qdisc(world: World) -> str:
    return subprocess.run(["ip", "netns", "exec", world.ns_a, "tc", "qdisc", "show", "dev", world.link_a],
                          capture_output=True, text=True, timeout=10, check=True).stdout


def test_should_read_firing_alerts_from_alertmanager(world: World) -> None:
    # The lending controller does not run in this world: its staleness alert fires, with its SOP.
    wait_for("LendingControllerDown to fire", lambda: any(
        a.name == "LendingControllerDown" for a in firing_alerts(world.alertmanager)), 30, interval_s=0.5)
    assert os.path.exists(REPO / "docs" / "sop" / "lending-controller-down.md")


SHOCK_S = 4.0
"""s of storage load at the shock's rate per reading: some 36 chunks at 9/s."""


def shock_storage(world: World, jittered: bool) -> tuple[Criterion, Criterion]:
    """The verdict's storage criteria (p99, and what the load offered) over SHOCK_S of the storage load from node A at
    the shock's rate, with the storage-jitter drill's fault on node A's link throughout or not; the fault is reverted at
    the reading's end, before the chunks still in flight drain."""
    spec = acceptance_site().acceptance
    load = storage_load(NodeATier(world.ns_a, world.hot_tier), CHUNK, spec.peak.storage_write_mib_s,
                        spec.max_storage_write_mib_s, Checkpoints())
    fault = jitter(world)
    if jittered:
        run_commands(fault.inject, fault.env)
    try:
        began = time.time()
        writing = threading.Thread(target=load.run, args=(spec.shock_factor, began + SHOCK_S, threading.Event()))
        writing.start()
        time.sleep(SHOCK_S)
        ended = time.time()
    finally:
        if jittered:
            run_commands(fault.undo, fault.env)
    writing.join(timeout=60)
    measured = Measurements(began, ended, {"shock": (began, ended, {"ran_s": ended - began})}, load.drain(), [], [],
                            [], 0.5, (load.peak_per_s, load.bound_per_s), {}, None)
    criteria = {c.name: c for c in judge(spec, measured) if c.phase == "shock"}
    return criteria["storage p99 latency"], criteria["storage load"]


def test_should_see_the_storage_jitter_in_the_storage_figure(world: World) -> None:
    """The jitter lies on the path the storage criterion measures: a shock with the drill's fault in place fails it."""
    clean, clean_load = shock_storage(world, jittered=False)
    jittered, jittered_load = shock_storage(world, jittered=True)
    assert "tbf" not in netns_qdisc(world)
    assert clean.passed and clean_load.passed, (clean, clean_load)
    assert not jittered.passed and not jittered_load.passed, (jittered, jittered_load)
    p99 = {name: float(c.measured.split(" s ")[0]) for name, c in (("clean", clean), ("jittered", jittered))}
    assert p99["jittered"] > 3 * p99["clean"], p99
    FIGURES.append(f"storage from node A at the shock's rate for {SHOCK_S:g} s: clean p99 {clean.measured}, "
                   f"{clean_load.measured}; with the jitter drill's qdisc on its link p99 {jittered.measured}, "
                   f"{jittered_load.measured} (objective {clean.objective})")
