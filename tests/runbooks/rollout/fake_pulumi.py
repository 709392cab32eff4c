"""A Pulumi CLI stand-in for the Automation API: a `PulumiCommand` that records every call and keeps a
stack (config, outputs, update history) in memory, answering as the CLI does.

`preview --save-plan` writes a plan file that records the config it was made with, and streams the
summary event to the Automation API's event-log gRPC server, as the real engine does; `up --plan` refuses a
plan made with other config (Pulumi checks the plan's constraints the same way).
"""

import json
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import grpc
from pulumi import automation as auto
from pulumi.automation._cmd import CommandResult
from pulumi.automation.errors import create_command_error
from pulumi.runtime.proto import events_pb2, events_pb2_grpc
from semver import VersionInfo

PROJECT = "gpu-cluster"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.000Z"


class Crash(BaseException):
    """A kill at this point: BaseException, so no `except Exception` in the code under test swallows it."""


class FakePulumiCommand(auto.PulumiCommand):
    def __init__(self, clock: Callable[[], datetime], deployed_stage: str, deployed_at: datetime) -> None:
        # No super().__init__: it would run `pulumi version`.
        self.command = "pulumi"
        self.version = VersionInfo.parse("3.272.0")
        self.clock = clock
        self.calls: list[list[str]] = []
        self.config: dict[str, str] = {f"{PROJECT}:stage": deployed_stage}
        self.outputs: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []
        self.fail_up: str | None = None
        """When set, the next `up` fails with this error (recorded as a failed update)."""
        self.crash_after_up = False
        """When set, the next `up` completes and then the process 'dies' before returning."""
        self.locked_by: str | None = None
        """When set, every `up` fails as the CLI does when another update holds the stack (no history entry)."""
        self.during_up: Callable[[], None] = lambda: None
        """Runs inside each `up`, while the update is under way."""
        self.applied_plans: list[bytes] = []
        """The plan file's bytes as each `up --plan` read them."""
        self._lock = threading.Lock()
        self._record_update("initial deploy", "succeeded", deployed_at, {"create": 400})

    def run(self, args: list[str], cwd: str, additional_env: Any, on_output: Any = None,
            on_error: Any = None) -> CommandResult:
        with self._lock:
            self.calls.append(list(args))
        command = [a for a in args if not a.startswith("--")][:2]
        if command[:1] == ["preview"]:
            return self._preview(args)
        if command[:1] == ["up"]:
            return self._up(args)
        if command == ["stack", "select"]:
            return CommandResult("", "", 0)
        if command == ["config", "set"]:
            key, value = args[2], args[args.index("--") + 1]
            self.config[key if ":" in key else f"{PROJECT}:{key}"] = value
            return CommandResult("", "", 0)
        if command == ["stack", "output"]:
            return CommandResult(json.dumps(self.outputs), "", 0)
        if command == ["stack", "history"]:
            return CommandResult(json.dumps(list(reversed(self.history))), "", 0)
        raise AssertionError(f"the fake CLI does not know {args}")

    def ups(self) -> list[list[str]]:
        return [c for c in self.calls if c[0] == "up"]

    def previews(self) -> list[list[str]]:
        return [c for c in self.calls if c[0] == "preview"]

    def _preview(self, args: list[str]) -> CommandResult:
        path = _flag(args, "--save-plan")
        if path is not None:
            with open(path, "w", encoding="utf-8") as handle:
                json.dump({"manifest": {"version": str(self.version)}, "config": self.config,
                           "resourcePlans": {"stage": self.config[f"{PROJECT}:stage"]}}, handle, sort_keys=True)
        event_log = _flag(args, "--event-log")
        assert event_log is not None and event_log.startswith("tcp://"), args
        summary = {"sequence": 1, "timestamp": 0, "summaryEvent": {
            "maybeCorrupt": False, "durationSeconds": 1, "resourceChanges": {"create": 4, "same": 400}}}
        with grpc.insecure_channel(event_log.removeprefix("tcp://")) as channel:
            events_pb2_grpc.EventsStub(channel).StreamEvents(iter([events_pb2.EventRequest(event=json.dumps(summary))]))
        return CommandResult("Previewing update (prod)\n", "", 0)

    def _up(self, args: list[str]) -> CommandResult:
        message = _flag(args, "--message") or ""
        if self.locked_by is not None:
            raise create_command_error(CommandResult("", "error: [409] Conflict: Another update is currently in "
                                                     f"progress. ({self.locked_by})", 255))
        self.during_up()
        plan = _flag(args, "--plan")
        if plan is not None:
            with open(plan, "rb") as handle:
                self.applied_plans.append(handle.read())
            planned = json.loads(self.applied_plans[-1])["config"]
            if planned != self.config:
                return self._fail(message, "error: the update plan's config does not match the stack's config")
        if self.fail_up is not None:
            reason, self.fail_up = self.fail_up, None
            return self._fail(message, reason)
        self._record_update(message, "succeeded", self.clock(), {"create": 4, "same": 400})
        if self.crash_after_up:
            self.crash_after_up = False
            raise Crash("killed after `pulumi up` finished, before the runbook recorded it")
        return CommandResult("Updating (prod)\n", "", 0)

    def _fail(self, message: str, reason: str) -> CommandResult:
        self.history.append(self._entry(message, "failed", self.clock(), {}))
        raise create_command_error(CommandResult("", reason, 255))

    def _record_update(self, message: str, result: str, at: datetime, changes: dict[str, int]) -> None:
        self.history.append(self._entry(message, result, at, changes))
        self.outputs = {"stage": self.config[f"{PROJECT}:stage"], "gpu_count": 128}

    def _entry(self, message: str, result: str, at: datetime, changes: dict[str, int]) -> dict[str, Any]:
        return {
            "kind": "update", "startTime": at.strftime(TIME_FORMAT), "endTime": at.strftime(TIME_FORMAT),
            "message": message, "environment": {}, "result": result, "version": len(self.history) + 1,
            "config": {k: {"value": v, "secret": False} for k, v in self.config.items()},
            "resourceChanges": changes,
        }


def _flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None
