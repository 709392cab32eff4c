"""Acceptance check for one GPU node: it takes work only after it has proved itself here.

Copied to each node and run as root over SSH, so: Python 3.9+, standard library only, no project imports.
In order: the GPU Operator's driver is up; no second, host-installed driver; GPU count and model; the driver is
the operator's version; the operator's container toolkit sees that driver (the path Slurm's containerised jobs
take, docs/gpu-driver.md); power limits; ECC; row remapping; NVLink; PSU redundancy through the BMC; then the
DCGM diagnostic's per-test verdict, with temperatures and clocks sampled under its load.

Written for a hostile node: every tool runs from an argument list (never a shell) under a timeout, and what a tool
prints is data to parse, never something to run. Prints exactly one JSON object (each check with its detail and
its evidence) and records it under --record-dir; exit 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOOL_TIMEOUT_S = 30.0
DRIVER_READY = "/run/nvidia/validations/driver-ready"
"""Written on the host by the GPU Operator's validator once the driver on this node works (gpu-operator
cmd/nvidia-validator: defaultStatusPath /run/nvidia/validations, driverStatusFile driver-ready). The operator deploys
the driver only to nodes node-feature-discovery labelled, so the file also means NFD has seen the node."""
PROGRESS_EVERY_S = 60.0
STOP_GRACE_S = 5.0
STDIN_WAIT_S = 5.0
"""How long the check waits for the BMC password on stdin: a run by hand with an open, silent stdin still ends."""
DIAG_OUTPUT_MAX = 16 << 20
"""Bytes of dcgmi's output read back: a level-3 document on 8 GPUs is some 100 KiB; a runaway tool is not read whole."""
# nvidia-smi writes "[N/A]" (and "[Not Supported]" on some fields) where a GPU lacks the feature.
NOT_REPORTED = {"[N/A]", "[Not Supported]", "N/A"}
INVENTORY_FIELDS = (
    "index,uuid,name,driver_version,power.limit,ecc.mode.current,ecc.errors.uncorrected.volatile.total,temperature.gpu"
)
REMAP_FIELDS = "gpu_uuid,remapped_rows.failure,remapped_rows.pending"
# nvidia-smi --help-query-gpu: each reason reads "Active" / "Not Active". Newer drivers rename the family to
# clocks_event_reasons.* (NVML R550 docs, nvmlClocksEventReasons, docs.nvidia.com/deploy/nvml-api): we fall back.
THROTTLE_REASONS = ("hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown")
# `nvidia-smi nvlink --status` prints "GPU <i>: <name> (UUID: ...)" then one "Link <n>: <speed>" line per link:
# "25 GB/s" when up, "<inactive>" when down (captured on an A100-SXM4: tests/hosts/records/).
NVLINK_GPU = re.compile(r"^GPU (\d+): ")
NVLINK_LINK = re.compile(r"^\s*Link (\d+): (.*)$")
NVLINK_UP = re.compile(r"^\d+(\.\d+)? GB/s$")
# ipmitool's sensor-specific event strings for type 0x08 (Power Supply: "Presence detected", "Failure detected",
# "Predictive Failure", "Power Supply AC lost", "AC lost or out-of-range", ...); `sdr type` lines look like
#   PS1 Status       | 50h | ok  | 10.1 | Presence detected, Power Supply AC lost
PSU_FAULTS = ("failure detected", "predictive failure", "ac lost", "out-of-range", "config error")
# Where a host-installed NVIDIA driver leaves its user-space libraries and tools (Debian/Ubuntu multiarch, RHEL lib64,
# the .run installer's /usr/lib and /usr/bin). The operator's driver lives only in its driver root.
HOST_LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib", "usr/local/lib", "lib/x86_64-linux-gnu")
HOST_DRIVER_LIBRARIES = ("libcuda.so", "libnvidia-ml.so")
HOST_BIN_DIRS = ("usr/bin", "usr/local/bin", "usr/sbin", "bin", "sbin")
# dcgmi diag statuses (DCGM nvvs JsonOutput: PASS|FAIL|WARN|SKIPPED; DCGM 4: "Pass", "Fail", "Skip", ...). A test
# DCGM skips does not apply to this GPU (NVLink tests on an RTX 4090); every other word, known or not, fails.
DIAG_PASSED = {"pass"}
DIAG_EXCUSED = {"skip", "skipped"}
CONTAINER_ID = re.compile(r"^[0-9a-f]{12,64}$")


class ToolError(Exception):
    """A tool was missing, timed out, failed, or said something we cannot read."""

    def __init__(self, detail: str, said: str = "") -> None:
        super().__init__(detail)
        self.said = said.lower()  # the tool's whole answer, to recognise "not supported" however long it is


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    evidence: dict[str, Any] = field(default_factory=dict)
    """What the verdict rests on, as the tools said it: recorded with the verdict."""


@dataclass
class Gpu:
    index: int
    uuid: str
    name: str
    driver: str
    power_limit: str
    ecc_mode: str
    ecc_uncorrected: str
    max_temp_c: float | None


def run_tool(args: list[str], timeout_s: float = TOOL_TIMEOUT_S, env: dict[str, str] | None = None) -> str:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False, env=env,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ToolError(f"{args[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"{args[0]} timed out after {timeout_s:g} s") from None
    except OSError as err:
        raise ToolError(f"{args[0]} could not run: {err}") from None
    if proc.returncode != 0:
        said = (proc.stdout + proc.stderr).strip().replace("\n", " ")
        raise ToolError(f"{args[0]} exited {proc.returncode}: {said[:160]}", said)
    return proc.stdout


def smi(args: argparse.Namespace, *query: str) -> str:
    """nvidia-smi as the operator's validator runs it: chrooted into the driver root, so the driver container's own
    nvidia-smi loads its own libnvidia-ml and C library (gpu-operator MR 203, "chroot instead of exporting
    LD_LIBRARY_PATH and PATH"). Run from the host's PATH it would miss the library, or find a host driver's."""
    return run_tool(["chroot", args.driver_root, "nvidia-smi", *query])


def csv_rows(text: str, width: int, tool: str = "nvidia-smi") -> list[list[str]]:
    rows = [row for row in csv.reader(text.splitlines(), skipinitialspace=True) if row]
    if any(len(row) != width for row in rows):
        raise ToolError(f"unparseable {tool} output: {text.strip()[:60]}")
    return [[cell.strip() for cell in row] for row in rows]


def temperature(value: str) -> float | None:
    return None if value in NOT_REPORTED else float(value)


def query_gpus(args: argparse.Namespace) -> list[Gpu]:
    text = smi(args, f"--query-gpu={INVENTORY_FIELDS}", "--format=csv,noheader,nounits")
    try:
        return [Gpu(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], temperature(r[7])) for r in csv_rows(text, 8)]
    except ValueError:
        raise ToolError(f"unparseable nvidia-smi output: {text.strip()[:60]}") from None


def check_inventory(gpus: list[Gpu], expect_name: str, expect_count: int) -> Check:
    problems = []
    if len(gpus) < expect_count:
        problems.append(f"{len(gpus)} of {expect_count} GPUs")
    elif len(gpus) > expect_count:
        problems.append(f"{len(gpus)} GPUs, expected {expect_count}")
    problems += [f"GPU {g.index} is {g.name!r}, expected {expect_name!r}" for g in gpus if g.name != expect_name]
    return Check("gpu-inventory", not problems, "; ".join(problems) or f"{expect_count} x {expect_name}",
                 {"gpus": [{"index": g.index, "uuid": g.uuid, "name": g.name} for g in gpus]})


def check_host_driver(host_root: str) -> Check:
    """A second driver installed on the host (a distribution package, the .run installer, DKMS) fights the operator's
    for the kernel and hands host programs libraries of another version: its files alone fail the node."""
    root = Path(host_root)
    found: set[str] = set()
    for directory in HOST_LIBRARY_DIRS:
        try:
            found |= {str(p) for p in (root / directory).iterdir()
                      if p.name.startswith(HOST_DRIVER_LIBRARIES) and ".so" in p.name}
        except OSError:
            continue
    found |= {str(root / d / "nvidia-smi") for d in HOST_BIN_DIRS if (root / d / "nvidia-smi").exists()}
    modules = root / "lib" / "modules" / os.uname().release
    if modules.is_dir():
        found |= {str(p) for p in modules.rglob("nvidia*.ko*")}
    if found:
        shown = sorted(found)
        return Check("host-driver", False, f"a driver is installed on the host besides the operator's: "
                                           f"{', '.join(shown[:4])}{' ...' if len(shown) > 4 else ''}",
                     {"host_files": shown})
    return Check("host-driver", True, "no NVIDIA driver files on the host outside the operator's driver root")


def check_driver(gpus: list[Gpu], operator_version: str) -> Check:
    found = sorted({g.driver for g in gpus})
    if found != [operator_version]:
        return Check("driver", False, f"driver {', '.join(found)} is loaded; the GPU Operator installs "
                                      f"{operator_version}: the node runs a driver other than the operator's",
                     {"loaded": found, "operator": operator_version})
    return Check("driver", True, f"driver {operator_version}, the GPU Operator's", {"loaded": found})


def check_container_toolkit(args: argparse.Namespace) -> Check:
    """The operator's nvidia-container-cli, pointed at the driver root as enroot's GPU hook calls it on Slurm nodes,
    must see the operator's driver: `info --csv` prints "NVRM version,CUDA version" then the two values
    (libnvidia-container src/cli/info.c)."""
    try:
        text = run_tool([args.toolkit_cli, f"--root={args.driver_root}", "info", "--csv"])
        lines = text.splitlines()
        nvrm, cuda = csv_rows(lines[1], 2, "nvidia-container-cli")[0] if len(lines) > 1 else ("", "")
    except ToolError as err:
        return Check("container-toolkit", False, f"the operator's container toolkit cannot reach its driver: {err}")
    if nvrm != args.driver_version:
        return Check("container-toolkit", False, f"the container toolkit sees driver {nvrm or '(none)'}, the "
                                                 f"operator installs {args.driver_version}", {"nvrm": nvrm})
    return Check("container-toolkit", True, f"containers get driver {nvrm} (CUDA {cuda}) from {args.driver_root}",
                 {"nvrm": nvrm, "cuda": cuda})


def check_power_limit(gpus: list[Gpu], limit_w: float) -> Check:
    wrong = []
    for g in gpus:
        try:
            if abs(float(g.power_limit) - limit_w) > 1.0:  # the driver reports e.g. 400.00; allow rounding
                wrong.append(f"GPU {g.index} at {g.power_limit} W")
        except ValueError:
            wrong.append(f"GPU {g.index} reports {g.power_limit!r}")
    detail = f"expected {limit_w:g} W: " + "; ".join(wrong) if wrong else f"all {len(gpus)} GPUs at {limit_w:g} W"
    return Check("power-limit", not wrong, detail, {"power_limit_w": {g.index: g.power_limit for g in gpus}})


def check_ecc(gpus: list[Gpu]) -> Check:
    problems = []
    for g in gpus:
        # Consumer cards (RTX 4090) have no ECC to enable: "[N/A]" is their normal answer.
        if g.ecc_mode not in NOT_REPORTED and g.ecc_mode != "Enabled":
            problems.append(f"GPU {g.index} ECC mode {g.ecc_mode}")
        if g.ecc_uncorrected in NOT_REPORTED:
            continue
        if not g.ecc_uncorrected.isdigit():
            problems.append(f"GPU {g.index} uncorrected ECC count {g.ecc_uncorrected!r}")
        elif int(g.ecc_uncorrected) > 0:
            problems.append(f"GPU {g.index} has {g.ecc_uncorrected} uncorrected volatile ECC errors")
    enabled = sum(g.ecc_mode == "Enabled" for g in gpus)
    return Check("ecc", not problems, "; ".join(problems) or f"ECC enabled on {enabled} of {len(gpus)} GPUs, 0 errors",
                 {"ecc": {g.index: [g.ecc_mode, g.ecc_uncorrected] for g in gpus}})


def is_set(flag: str) -> bool:
    return flag.lower() not in {"0", "no", "false"}


def check_row_remap(args: argparse.Namespace, gpus: list[Gpu]) -> Check:
    try:
        text = smi(args, f"--query-remapped-rows={REMAP_FIELDS}", "--format=csv,noheader")
        rows = csv_rows(text, 3)
    except ToolError as err:
        if "not supported" in err.said or "is not a valid field" in err.said:
            return Check("row-remap", True, "not supported")
        return Check("row-remap", False, str(err))
    supported = [r for r in rows if r[1] not in NOT_REPORTED and r[2] not in NOT_REPORTED]
    if not supported:  # GPUs before Ampere, and consumer cards, have no row remapper
        return Check("row-remap", True, "not supported")
    index = {g.uuid: g.index for g in gpus}
    problems = []
    for uuid, failure, pending in supported:
        gpu = f"GPU {index.get(uuid, uuid)}"
        if is_set(failure):
            problems.append(f"{gpu} row remap failure")
        if is_set(pending):
            problems.append(f"{gpu} row remap pending (needs a reset)")
    return Check("row-remap", not problems, "; ".join(problems) or f"no failed or pending remaps on {len(rows)} GPUs",
                 {"remapped_rows": rows})


def check_nvlink(args: argparse.Namespace, gpus: list[Gpu]) -> Check:
    """Every GPU must have all of its model's NVLinks up; one down halves a ring's bandwidth for a whole job."""
    if args.expect_nvlinks == 0:
        return Check("nvlink", True, f"{args.expect_name} has no NVLink")
    try:
        text = smi(args, "nvlink", "--status")
    except ToolError as err:
        return Check("nvlink", False, str(err))
    up: dict[int, int] = {}
    down: dict[int, list[str]] = {}
    gpu = None
    for line in text.splitlines():
        header, link = NVLINK_GPU.match(line), NVLINK_LINK.match(line)
        if header:
            gpu = int(header.group(1))
            up.setdefault(gpu, 0)
        elif link and gpu is not None:
            if NVLINK_UP.match(link.group(2).strip()):
                up[gpu] += 1
            else:
                down.setdefault(gpu, []).append(f"link {link.group(1)} {link.group(2).strip()}")
    problems = [f"GPU {g.index}: {up.get(g.index, 0)} of {args.expect_nvlinks} NVLinks up"
                + (f" ({', '.join(down[g.index])})" if g.index in down else "")
                for g in gpus if up.get(g.index, 0) < args.expect_nvlinks]
    return Check("nvlink", not problems, "; ".join(problems) or f"{args.expect_nvlinks} NVLinks up on each GPU",
                 {"links_up": up, "links_down": down})


def check_psu_redundancy(args: argparse.Namespace) -> Check:
    """Asks the node's BMC over the network (IPMI v2 lanplus) with the site's BMC credentials: the password travels in
    IPMI_PASSWORD (ipmitool(1) -E), never on a command line. A missing tool or an unreachable BMC proves nothing."""
    if not args.bmc_password:
        return Check("psu-redundancy", False, "no BMC password on stdin: PSU redundancy unproven")
    command = ["ipmitool", "-I", "lanplus", "-H", args.bmc_host, "-U", args.bmc_user, "-E",
               "-N", "3", "-R", "2", "sdr", "type", "Power Supply"]  # 3 s per try, 2 retries: within the timeout
    try:
        text = run_tool(command, env={"PATH": os.environ.get("PATH", ""), "IPMI_PASSWORD": args.bmc_password})
    except ToolError as err:
        return Check("psu-redundancy", False, f"BMC {args.bmc_host}: {err}: PSU redundancy unproven")
    lines = [[f.strip() for f in line.split("|")] for line in text.splitlines() if line.count("|") >= 4]
    # A "PS Redundancy" sensor reports redundancy, not a supply; we count supplies ourselves.
    supplies = [f for f in lines if "redundan" not in f[0].lower()]
    problems, present = [], 0
    for fields in supplies:
        name, state = fields[0], fields[-1]
        faults = [fault for fault in PSU_FAULTS if fault in state.lower()]
        if "presence detected" in state.lower() and not faults:
            present += 1
        else:
            problems.append(f"{name}: {state or 'not present'}")
    if not supplies:
        problems.append(f"no PSU sensors in ipmitool output: {text.strip()[:60]}")
    elif present < 2:
        problems.append(f"only {present} healthy PSU(s), redundancy needs 2")
    return Check("psu-redundancy", not problems, "; ".join(problems) or f"{present} PSUs present, none failed",
                 {"sdr": [" | ".join(f) for f in lines]})


@dataclass
class Load:
    """What the GPUs did while the diagnostic loaded them."""

    hottest_c: dict[int, float] = field(default_factory=dict)
    slowest_sm_mhz: dict[int, float] = field(default_factory=dict)
    throttled: dict[int, set[str]] = field(default_factory=dict)
    samples: int = 0
    error: str = ""


def sample_load(args: argparse.Namespace, family: str, load: Load) -> str:
    """One reading of every GPU into `load`; returns the throttle-reason family the driver knows."""
    fields = ",".join(["index", "temperature.gpu", "clocks.sm"] + [f"{family}.{r}" for r in THROTTLE_REASONS])
    try:
        text = smi(args, f"--query-gpu={fields}", "--format=csv,noheader,nounits")
    except ToolError as err:
        if "is not a valid field" in err.said and family != "clocks_event_reasons":
            return "clocks_event_reasons"  # a driver that knows only the new name
        raise
    try:
        for row in csv_rows(text, 3 + len(THROTTLE_REASONS)):
            index, temp = int(row[0]), temperature(row[1])
            if temp is not None:
                load.hottest_c[index] = max(temp, load.hottest_c.get(index, temp))
            if row[2] not in NOT_REPORTED:
                load.slowest_sm_mhz[index] = min(float(row[2]), load.slowest_sm_mhz.get(index, float(row[2])))
            active = {r for i, r in enumerate(THROTTLE_REASONS) if row[3 + i] == "Active"}
            load.throttled.setdefault(index, set()).update(active)
    except ValueError:
        raise ToolError(f"unparseable nvidia-smi output: {text.strip()[:60]}") from None
    load.samples += 1
    return family


def stop(proc: subprocess.Popen[bytes]) -> None:
    # crictl and dcgmi may fork; their own session lets us end the whole group.
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_GRACE_S)
    except ProcessLookupError:
        proc.wait(timeout=STOP_GRACE_S)


def dcgm_container(args: argparse.Namespace) -> str:
    """The operator's standalone DCGM (chart value dcgm.enabled; DaemonSet nvidia-dcgm, container nvidia-dcgm-ctr,
    gpu-operator assets/state-dcgm/0400_dcgm.yml): dcgmi runs where nv-hostengine and its diagnostic plugins are."""
    text = run_tool(["crictl", "--runtime-endpoint", args.cri_endpoint, "ps", "--name", f"^{args.dcgm_container}$",
                     "--state", "Running", "--quiet"])
    ids = text.split()
    if not ids:
        raise ToolError(f"no running {args.dcgm_container} container: is the operator's DCGM deployed on this node?")
    if not CONTAINER_ID.match(ids[0]):
        raise ToolError(f"unreadable container id from crictl: {ids[0][:60]!r}")
    return ids[0]


def run_diag(args: argparse.Namespace, container: str, load: Load) -> tuple[int | None, str, str]:
    """Runs `dcgmi diag -r <level> -j` in the DCGM container, sampling the GPUs until it ends or the deadline passes.
    Returns its exit code (None when it was stopped at the deadline), stdout and stderr. Output goes to files: a
    level-3 document outgrows a pipe's buffer long before the end, and we read it only then."""
    command = ["crictl", "--runtime-endpoint", args.cri_endpoint, "exec", container,
               "dcgmi", "diag", "-r", str(args.diag_level), "-j"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + args.diag_timeout_s
        family = "clocks_throttle_reasons"
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                if not load.error:
                    try:
                        family = sample_load(args, family, load)
                    except ToolError as sample_error:
                        load.error = str(sample_error)
                time.sleep(max(0.0, min(args.sample_s, deadline - time.monotonic())))
        finally:
            code = proc.poll()
            if code is None:
                stop(proc)
        out.seek(0)
        err.seek(0)
        return (code, out.read(DIAG_OUTPUT_MAX).decode(errors="replace"),
                err.read(DIAG_OUTPUT_MAX).decode(errors="replace"))


def diag_document(stdout: str) -> dict[str, Any]:
    """The JSON document in dcgmi's output; dcgmi may print a line before it ("Successfully ran diagnostic ...")."""
    start = stdout.find("{")
    try:
        document = json.loads(stdout[start:]) if start >= 0 else None
    except json.JSONDecodeError:
        document = None
    if not isinstance(document, dict):
        raise ToolError(f"dcgmi printed no JSON result: {stdout.strip()[:80]!r}")
    return document


def diag_results(document: dict[str, Any]) -> tuple[list[tuple[str, str, str]], str]:
    """(test, entity, status) for every result, DCGM 3 ("DCGM GPU Diagnostic") or 4 ("DCGM Diagnostic") shaped,
    and DCGM's runtime error if it reported one."""
    root = document.get("DCGM Diagnostic", document.get("DCGM GPU Diagnostic", {}))
    root = root if isinstance(root, dict) else {}
    runtime_error = str(root.get("runtime_error") or document.get("runtime_error") or "")
    results = []
    for category in root.get("test_categories") or []:
        for test in (category.get("tests") or []) if isinstance(category, dict) else []:
            if not isinstance(test, dict):
                continue  # DCGM 3 puts nulls between tests
            for result in test.get("results") or []:
                if not isinstance(result, dict):
                    continue
                entity = result.get("entity_id", result.get("gpu_ids", "all"))
                # DCGM's own words for a failure: 3.x lists strings, 4.x objects with "warning".
                said = "; ".join(w.get("warning", "") if isinstance(w, dict) else str(w)
                                 for w in result.get("warnings") or [])
                status = str(result.get("status", "(no status)"))
                results.append((str(test.get("name", "?")), f"GPU {entity}", f"{status}: {said}" if said else status))
    return results, runtime_error


def check_diag(args: argparse.Namespace, code: int | None, stdout: str, stderr: str) -> Check:
    level = f"dcgmi diag -r {args.diag_level}"
    if code is None:
        return Check("dcgm-diag", False, f"{level} did not finish within {args.diag_timeout_s:g} s and was stopped",
                     {"stdout": stdout[-2000:], "stderr": stderr[-2000:]})
    try:
        results, runtime_error = diag_results(diag_document(stdout))
    except ToolError as err:
        return Check("dcgm-diag", False, f"{level} exited {code}: {err} {stderr.strip()[:80]}".strip(),
                     {"stderr": stderr[-2000:]})
    failed = [f"{test} on {entity}: {status}" for test, entity, status in results
              if status.split(":")[0].strip().lower() not in DIAG_PASSED | DIAG_EXCUSED]
    if runtime_error:
        failed.insert(0, f"runtime error: {runtime_error}")
    if not runtime_error and not any(status.split(":")[0].strip().lower() in DIAG_PASSED for _, _, status in results):
        failed.append("no test passed" + (" (every one skipped)" if results else ": no test results"))
    tests = sorted({test for test, _, _ in results})
    evidence = {"exit_code": code, "tests": tests, "failures": failed, "results": len(results)}
    if failed:
        return Check("dcgm-diag", False, f"{level}: " + "; ".join(failed), evidence)
    return Check("dcgm-diag", True, f"{level}: {len(tests)} tests passed ({', '.join(tests)})", evidence)


def check_burn_in(args: argparse.Namespace, load: Load, seconds: float) -> Check:
    """Temperatures and clocks under the diagnostic's load, against the rack's cooling: a GPU past the incident
    temperature, or clocked down for heat or a power brake, says the rack does not hold this node at full load."""
    problems = [load.error] if load.error else []
    if not load.samples:
        problems.append("no reading under load")
    problems += [f"GPU {i} reached {t:g} C (limit {args.max_temp_c:g} C)"
                 for i, t in sorted(load.hottest_c.items()) if t > args.max_temp_c]
    problems += [f"GPU {i} throttled: {', '.join(sorted(rs))}" for i, rs in sorted(load.throttled.items()) if rs]
    evidence = {"seconds": round(seconds, 1), "samples": load.samples, "hottest_c": load.hottest_c,
                "slowest_sm_mhz": load.slowest_sm_mhz, "rack": args.rack, "cooling": args.cooling}
    if problems:
        return Check("burn-in", False, f"under dcgmi diag -r {args.diag_level} in rack {args.rack} "
                                       f"({args.cooling}): " + "; ".join(problems), evidence)
    peak = max(load.hottest_c.values()) if load.hottest_c else None
    return Check("burn-in", True, f"{seconds:.0f} s under load, hottest GPU {peak:g} C, no throttling" if peak
                 is not None else f"{seconds:.0f} s under load, no temperature reported", evidence)


def check_under_load(args: argparse.Namespace, gpus: list[Gpu]) -> list[Check]:
    """The DCGM diagnostic is both the load and a verdict; the burn-in judges what the GPUs did meanwhile."""
    try:
        container = dcgm_container(args)
    except ToolError as err:
        return [Check("dcgm-diag", False, str(err)), Check("burn-in", False, "skipped: no diagnostic to load the GPUs")]
    load = Load()
    started = time.monotonic()
    code, stdout, stderr = run_diag(args, container, load)
    for g in gpus:
        if g.index in load.hottest_c:
            g.max_temp_c = max(load.hottest_c[g.index], g.max_temp_c if g.max_temp_c is not None else -273.0)
    return [check_diag(args, code, stdout, stderr), check_burn_in(args, load, time.monotonic() - started)]


def own_version() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--node", required=True)
    parser.add_argument("--rack", required=True)
    parser.add_argument("--cooling", required=True, help='the rack\'s cooling, for the record: "direct_liquid 45 kW"')
    parser.add_argument("--expect-name", required=True, help='e.g. "NVIDIA A800-SXM4-80GB"')
    parser.add_argument("--expect-count", type=int, required=True)
    parser.add_argument("--expect-nvlinks", type=int, required=True, help="NVLinks up on each GPU; 0 for none")
    parser.add_argument("--driver-version", required=True, help="the driver the GPU Operator installs")
    parser.add_argument("--driver-root", required=True, help="the operator's driver root, /run/nvidia/driver")
    parser.add_argument("--toolkit-cli", required=True, help="the operator's nvidia-container-cli")
    parser.add_argument("--host-root", default="/", help="where to look for a host-installed driver")
    parser.add_argument("--max-temp-c", type=float, required=True)
    parser.add_argument("--power-limit-w", type=float, required=True)
    parser.add_argument("--diag-level", type=int, required=True, choices=(1, 2, 3, 4))
    parser.add_argument("--diag-timeout-s", type=float, required=True)
    parser.add_argument("--dcgm-container", required=True, help="the operator's DCGM container name")
    parser.add_argument("--cri-endpoint", required=True, help="the container runtime's CRI socket, for crictl")
    parser.add_argument("--sample-s", type=float, default=1.0)
    parser.add_argument("--bmc-host", required=True)
    parser.add_argument("--bmc-user", required=True)
    parser.add_argument("--record-dir", required=True, help="where each report is kept on the node")
    parser.add_argument("--driver-ready", default=DRIVER_READY,
                        help="file that exists once the operator's driver works on this node")
    parser.add_argument("--driver-wait-s", type=float, default=1800.0,
                        help="how long to wait for it: the operator builds and loads the driver first")
    args = parser.parse_args(argv)
    args.bmc_password = read_bmc_password()
    return args


def read_bmc_password() -> str:
    """The BMC password arrives as stdin's first line, never in argv, where `ps` shows it to every user."""
    if sys.stdin is None or sys.stdin.isatty():
        return ""
    ready, _, _ = select.select([sys.stdin], [], [], STDIN_WAIT_S)
    return sys.stdin.readline().rstrip("\n") if ready else ""


def wait_for_driver(path: str, wait_s: float) -> Check:
    """Bounded: the check starts right after the operator is installed, before its driver reaches this node."""
    started = time.monotonic()
    reported = started
    while not os.path.exists(path):
        waited = time.monotonic() - started
        if waited >= wait_s:
            return Check("driver-ready", False, f"the GPU Operator's driver was not ready within {wait_s:g} s "
                                                f"({path} absent): is the node labelled by node-feature-discovery, "
                                                "and does the driver pod run on it?")
        if time.monotonic() - reported >= PROGRESS_EVERY_S:
            print(f"node-check: waiting for the driver ({path}), {waited:.0f} of {wait_s:g} s", file=sys.stderr,
                  flush=True)
            reported = time.monotonic()
        time.sleep(min(1.0, wait_s))
    return Check("driver-ready", True, f"{path} present after {time.monotonic() - started:.0f} s")


GPU_CHECKS = ("gpu-inventory", "driver", "container-toolkit", "power-limit", "ecc", "row-remap", "nvlink",
              "dcgm-diag", "burn-in")


def run_checks(args: argparse.Namespace) -> tuple[list[Check], list[Gpu]]:
    driver = wait_for_driver(args.driver_ready, args.driver_wait_s)
    host = check_host_driver(args.host_root)
    if not driver.ok:
        return [driver, host, *(Check(name, False, "skipped: driver-ready failed") for name in GPU_CHECKS),
                check_psu_redundancy(args)], []
    gpus: list[Gpu] = []
    try:
        gpus = query_gpus(args)
        inventory = check_inventory(gpus, args.expect_name, args.expect_count)
    except ToolError as err:
        inventory = Check("gpu-inventory", False, str(err))
    version = check_driver(gpus, args.driver_version) if gpus else Check("driver", False, "skipped: no GPU data")
    checks = [driver, host, inventory, version]
    if gpus:
        checks += [check_container_toolkit(args), check_power_limit(gpus, args.power_limit_w), check_ecc(gpus)]
    else:
        checks += [Check(name, False, "skipped: no GPU data") for name in ("container-toolkit", "power-limit", "ecc")]
    checks += [check_row_remap(args, gpus), check_nvlink(args, gpus), check_psu_redundancy(args)]
    # Loading a node whose GPUs or driver are already wrong proves nothing and may hide the first failure.
    if inventory.ok and version.ok:
        checks += check_under_load(args, gpus)
    else:
        checks += [Check(name, False, "skipped: gpu-inventory or driver failed") for name in ("dcgm-diag", "burn-in")]
    return checks, gpus


def record(report: dict[str, Any], record_dir: str) -> str:
    """Keeps the report on the node beside the earlier ones, replaced atomically: the evidence outlives the run."""
    directory = Path(record_dir)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = directory / f"node-check-{stamp}.json"
    partial = directory / f".{path.name}.new"
    partial.write_text(json.dumps(report, indent=1) + "\n")
    os.replace(partial, path)
    return str(path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        checks, gpus = run_checks(args)
    except Exception as err:  # the caller parses JSON: report even our own bugs as a failed check
        checks, gpus = [Check("node-check", False, f"internal error: {type(err).__name__}: {err}")], []
    temps = [g.max_temp_c for g in gpus if g.max_temp_c is not None]
    report: dict[str, Any] = {
        "node": args.node,
        "ok": all(c.ok for c in checks),
        "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail, "evidence": c.evidence} for c in checks],
        "gpus": [{"index": g.index, "uuid": g.uuid, "name": g.name, "max_temp_c": g.max_temp_c} for g in gpus],
        "max_temp_c": max(temps) if temps else None,
        "check_version": own_version(),
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        report["record"] = record(report, args.record_dir)
    except OSError as err:
        report["ok"] = False
        report["checks"].append({"name": "record", "ok": False, "detail": f"report not recorded: {err}",
                                 "evidence": {}})
    print(json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
