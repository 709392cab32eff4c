"""Acceptance check for one GPU node: inventory, driver, power, ECC, row remap, PSUs, burn-in.

Copied to each node and run over SSH, so: Python 3.9+, standard library only, no project imports.
Prints exactly one JSON object; exit 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOOL_TIMEOUT_S = 30.0
DRIVER_READY = "/run/nvidia/validations/driver-ready"
"""Written on the host by the GPU Operator's validator once the driver on this node works (gpu-operator
cmd/nvidia-validator: defaultStatusPath /run/nvidia/validations, driverStatusFile driver-ready). The operator deploys
the driver only to nodes node-feature-discovery labelled, so the file also means NFD has seen the node."""
PROGRESS_EVERY_S = 60.0
# nvidia-smi writes "[N/A]" (and "[Not Supported]" on some fields) where a GPU lacks the feature.
NOT_REPORTED = {"[N/A]", "[Not Supported]", "N/A"}
INVENTORY_FIELDS = (
    "index,uuid,name,driver_version,power.limit,ecc.mode.current,ecc.errors.uncorrected.volatile.total,temperature.gpu"
)
REMAP_FIELDS = "gpu_uuid,remapped_rows.failure,remapped_rows.pending"
# nvidia-smi --help-query-gpu: each reason reads "Active" / "Not Active". Newer drivers rename the family to
# clocks_event_reasons.* (NVML R550 docs, nvmlClocksEventReasons, docs.nvidia.com/deploy/nvml-api): we fall back.
THROTTLE_REASONS = ("hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown")
# ipmitool's sensor-specific event strings for type 0x08 (Power Supply: "Presence detected", "Failure detected",
# "Predictive Failure", "Power Supply AC lost", "AC lost or out-of-range", ...); `sdr type` lines look like
#   PS1 Status       | 50h | ok  | 10.1 | Presence detected, Power Supply AC lost
PSU_FAULTS = ("failure detected", "predictive failure", "ac lost", "out-of-range", "config error")


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


def run_tool(args: list[str], timeout_s: float = TOOL_TIMEOUT_S) -> str:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
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


def csv_rows(text: str, width: int, tool: str = "nvidia-smi") -> list[list[str]]:
    rows = [row for row in csv.reader(text.splitlines(), skipinitialspace=True) if row]
    if any(len(row) != width for row in rows):
        raise ToolError(f"unparseable {tool} output: {text.strip()[:60]}")
    return [[cell.strip() for cell in row] for row in rows]


def temperature(value: str) -> float | None:
    return None if value in NOT_REPORTED else float(value)


def query_gpus() -> list[Gpu]:
    text = run_tool(["nvidia-smi", f"--query-gpu={INVENTORY_FIELDS}", "--format=csv,noheader,nounits"])
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
    return Check("gpu-inventory", not problems, "; ".join(problems) or f"{expect_count} x {expect_name}")


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def check_driver(gpus: list[Gpu], min_driver: str) -> Check:
    found = sorted({g.driver for g in gpus})
    try:
        old = [v for v in found if version_key(v) < version_key(min_driver)]
    except ValueError:
        return Check("driver", False, f"unparseable driver version: {', '.join(found)} (minimum {min_driver})")
    if old:
        return Check("driver", False, f"driver {', '.join(old)} is older than {min_driver}")
    return Check("driver", True, f"driver {', '.join(found)} >= {min_driver}")


def check_power_limit(gpus: list[Gpu], limit_w: float) -> Check:
    wrong = []
    for g in gpus:
        try:
            if abs(float(g.power_limit) - limit_w) > 1.0:  # the driver reports e.g. 400.00; allow rounding
                wrong.append(f"GPU {g.index} at {g.power_limit} W")
        except ValueError:
            wrong.append(f"GPU {g.index} reports {g.power_limit!r}")
    detail = f"expected {limit_w:g} W: " + "; ".join(wrong) if wrong else f"all {len(gpus)} GPUs at {limit_w:g} W"
    return Check("power-limit", not wrong, detail)


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
    return Check("ecc", not problems, "; ".join(problems) or f"ECC enabled on {enabled} of {len(gpus)} GPUs, 0 errors")


def is_set(flag: str) -> bool:
    return flag.lower() not in {"0", "no", "false"}


def check_row_remap(gpus: list[Gpu]) -> Check:
    try:
        text = run_tool(["nvidia-smi", f"--query-remapped-rows={REMAP_FIELDS}", "--format=csv,noheader"])
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
    return Check("row-remap", not problems, "; ".join(problems) or f"no failed or pending remaps on {len(rows)} GPUs")


def check_psu_redundancy() -> Check:
    if shutil.which("ipmitool") is None:
        return Check("psu-redundancy", True, "ipmitool not found: skipped")
    try:
        text = run_tool(["ipmitool", "sdr", "type", "Power Supply"])
    except ToolError as err:
        return Check("psu-redundancy", False, str(err))
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
    return Check("psu-redundancy", not problems, "; ".join(problems) or f"{present} PSUs present, none failed")


def sample_burn(family: str) -> list[tuple[int, float | None, set[str]]]:
    """One reading per GPU: index, temperature, the throttle reasons now Active."""
    fields = ",".join(["index", "temperature.gpu"] + [f"{family}.{r}" for r in THROTTLE_REASONS])
    text = run_tool(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"])
    try:
        return [
            (int(row[0]), temperature(row[1]), {r for i, r in enumerate(THROTTLE_REASONS) if row[2 + i] == "Active"})
            for row in csv_rows(text, 5)
        ]
    except ValueError:
        raise ToolError(f"unparseable nvidia-smi output: {text.strip()[:60]}") from None


def stop(proc: subprocess.Popen[bytes]) -> None:
    # The burn tool may fork workers; its own session lets us end the whole group.
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
    except ProcessLookupError:
        proc.wait(timeout=5)


def check_burn_in(args: argparse.Namespace, gpus: list[Gpu]) -> Check:
    try:
        proc = subprocess.Popen(
            shlex.split(args.burn_command),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except (OSError, ValueError) as err:
        return Check("burn-in", False, f"burn command could not start: {err}")
    hottest: dict[int, float] = {}
    throttled: dict[int, set[str]] = {}
    family, error = "clocks_throttle_reasons", ""
    deadline = time.monotonic() + args.burn_in_s
    try:
        while True:
            try:
                readings = sample_burn(family)
            except ToolError as err:
                if "is not a valid field" not in err.said or family == "clocks_event_reasons":
                    error = str(err)
                    break
                family = "clocks_event_reasons"  # a driver that knows only the new name
                continue
            for idx, temp, active in readings:
                if temp is not None:
                    hottest[idx] = max(temp, hottest.get(idx, temp))
                throttled.setdefault(idx, set()).update(active)
            left = deadline - time.monotonic()
            if left <= 0 or proc.poll() is not None:
                break
            time.sleep(min(args.sample_s, left))
    finally:
        # A burn that ends before the deadline (crashed, or ran `true`) did not load the GPUs long enough.
        exit_code = proc.poll() if time.monotonic() < deadline else None
        stop(proc)
    for g in gpus:
        if g.index in hottest:
            g.max_temp_c = max(hottest[g.index], g.max_temp_c if g.max_temp_c is not None else hottest[g.index])
    problems = [error] if error else []
    if exit_code is not None:
        problems.append(f"burn command exited with code {exit_code} before {args.burn_in_s:g} s")
    problems += [
        f"GPU {i} reached {t:g} C (limit {args.max_temp_c:g} C)" for i, t in hottest.items() if t > args.max_temp_c
    ]
    problems += [f"GPU {i} throttled: {', '.join(sorted(rs))}" for i, rs in sorted(throttled.items()) if rs]
    peak = f"hottest GPU {max(hottest.values()):g} C" if hottest else "no temperature reported"
    return Check(
        "burn-in", not problems, "; ".join(problems) or f"{args.burn_in_s:g} s under load, {peak}, no throttling"
    )


def own_version() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--node", required=True)
    parser.add_argument("--expect-name", required=True, help='e.g. "NVIDIA A800-SXM4-80GB"')
    parser.add_argument("--expect-count", type=int, required=True)
    parser.add_argument("--min-driver", required=True)
    parser.add_argument("--max-temp-c", type=float, required=True)
    parser.add_argument("--power-limit-w", type=float, required=True)
    parser.add_argument("--burn-in-s", type=float, required=True)
    parser.add_argument("--burn-command", required=True)
    parser.add_argument("--sample-s", type=float, default=1.0)
    parser.add_argument("--driver-ready", default=DRIVER_READY,
                        help="file that exists once the driver works; empty for a driver installed on the host")
    parser.add_argument("--driver-wait-s", type=float, default=1800.0,
                        help="how long to wait for it: the operator builds and loads the driver first")
    return parser.parse_args(argv)


def wait_for_driver(path: str, wait_s: float) -> Check:
    """Bounded: the check starts right after the operator is installed, before its driver reaches this node."""
    if not path:
        return Check("driver-ready", True, "driver installed on the host")
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


def run_checks(args: argparse.Namespace) -> tuple[list[Check], list[Gpu]]:
    driver = wait_for_driver(args.driver_ready, args.driver_wait_s)
    if not driver.ok:
        skipped = ("gpu-inventory", "driver", "power-limit", "ecc", "row-remap", "burn-in")
        return [driver, *(Check(name, False, "skipped: driver-ready failed") for name in skipped),
                check_psu_redundancy()], []
    gpus: list[Gpu] = []
    try:
        gpus = query_gpus()
        inventory = check_inventory(gpus, args.expect_name, args.expect_count)
    except ToolError as err:
        inventory = Check("gpu-inventory", False, str(err))
    checks = [driver, inventory]
    if gpus:
        checks += [check_driver(gpus, args.min_driver), check_power_limit(gpus, args.power_limit_w), check_ecc(gpus)]
    else:
        checks += [Check(name, False, "skipped: no GPU data") for name in ("driver", "power-limit", "ecc")]
    checks += [check_row_remap(gpus), check_psu_redundancy()]
    # Heating a node whose GPUs are already wrong proves nothing and may hide the first failure.
    checks.append(
        check_burn_in(args, gpus) if inventory.ok else Check("burn-in", False, "skipped: gpu-inventory failed")
    )
    return checks, gpus


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
        "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks],
        "gpus": [{"index": g.index, "uuid": g.uuid, "name": g.name, "max_temp_c": g.max_temp_c} for g in gpus],
        "max_temp_c": max(temps) if temps else None,
        "check_version": own_version(),
    }
    print(json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
