"""Deploy a stage through the Pulumi Automation API: set it in the stack config, preview and save the plan,
apply exactly that plan with the policy pack.

The plan file's SHA-256 is the digest approvers see; `up --plan` refuses any change the plan did not
contain, so what was approved is what runs. `apply` takes the plan's bytes (the ones the runbook hashed
and compared with the approved digest), not a path, and hands `up` a private copy of exactly those bytes.
Every update carries a message naming the rollout, which is how a resumed runbook finds an update that
finished while it was down instead of running it again.
"""

import hashlib
import json
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pulumi import automation as auto

STAGE_KEY = "stage"
"""The project config key that selects the rollout stage (Pulumi.yaml: gpu-cluster:stage)."""


class UpdateInProgressError(Exception):
    """The stack history shows this update still running (a CLI outlived the runbook that started it)."""


STACK_LOCKED = (auto.ConcurrentUpdateError, UpdateInProgressError)
"""Another update holds the stack: no deploy of ours ran, so nothing of ours failed or needs rolling back."""


@dataclass(frozen=True)
class SavedPlan:
    path: Path
    digest: str
    changes: dict[str, int]
    """Resource operations the preview counted (create, update, same, ...)."""


@dataclass(frozen=True)
class Deployment:
    outputs: dict[str, Any]
    """Stack outputs; secret ones as "[secret]"."""
    summary: dict[str, Any]
    """The update's result, version, times and resource changes."""


def pulumi_command() -> auto.PulumiCommand | None:
    """The Pulumi CLI the Automation API drives (None: `pulumi` on PATH)."""
    return None


def plan_digest(plan: bytes) -> str:
    return "sha256:" + hashlib.sha256(plan).hexdigest()


class StackDeployer:
    def __init__(self, stack: auto.Stack, policy_pack: str) -> None:
        self.stack = stack
        self.policy_pack = policy_pack

    @classmethod
    def open(cls, project_dir: Path, stack_name: str, policy_pack: str,
             pulumi_command: auto.PulumiCommand | None = None) -> "StackDeployer":
        workspace = auto.LocalWorkspace(work_dir=str(project_dir), pulumi_command=pulumi_command)
        return cls(auto.Stack.select(stack_name, workspace), policy_pack)

    def set_stage(self, stage: str) -> None:
        self.stack.set_config(STAGE_KEY, auto.ConfigValue(value=stage))

    def preview(self, stage: str, plan_path: Path) -> SavedPlan:
        self.set_stage(stage)
        plan_path.parent.mkdir(parents=True, exist_ok=True)
        result = self.stack.preview(plan=str(plan_path), policy_packs=[self.policy_pack])
        changes = {str(op): int(count) for op, count in result.change_summary.items()}
        return SavedPlan(plan_path, plan_digest(plan_path.read_bytes()), changes)

    def apply(self, plan: bytes, message: str) -> Deployment:
        """`pulumi up --plan <plan> --policy-pack <pack>`: only what these plan bytes allow."""
        # A directory only this process's user can enter: no one swaps the file between here and `up`.
        with tempfile.TemporaryDirectory(prefix="gpuctl-plan-") as private:
            path = Path(private) / "approved.plan.json"
            path.write_bytes(plan)
            self.stack.up(plan=str(path), policy_packs=[self.policy_pack], message=message, show_secrets=False)
        return self.finished(message)

    def converge(self, stage: str, message: str) -> Deployment:
        """Set the stage and update without a saved plan (rollback: nothing new is introduced)."""
        self.set_stage(stage)
        self.stack.up(policy_packs=[self.policy_pack], message=message, show_secrets=False)
        return self.finished(message)

    def update(self, message: str) -> auto.UpdateSummary | None:
        """The update this runbook started with `message`, if the stack history has it."""
        for entry in self.stack.history(show_secrets=False):
            if entry.kind == "update" and entry.message == message:
                return entry
        return None

    def finished(self, message: str) -> Deployment:
        entry = self.update(message)
        if entry is None:
            raise LookupError(f'no update "{message}" in the stack history')
        if entry.result == "in-progress":
            raise UpdateInProgressError(f'update "{message}" is still in progress (started {entry.start_time})')
        outputs = {key: "[secret]" if out.secret else out.value for key, out in self.stack.outputs().items()}
        summary = {
            "result": entry.result,
            "version": entry.version,
            "start_time": _utc(entry.start_time).isoformat(),
            "end_time": _utc(entry.end_time).isoformat() if entry.end_time else None,
            "resource_changes": dict(entry.resource_changes or {}),
        }
        return Deployment(outputs, summary)

    def deployment_digest(self) -> str | None:
        """The deployed stack as a digest: the newest successful update in the stack history, its version and config
        (secrets masked). A passed acceptance campaign is bound to it as an approval is bound to its plan's digest;
        any later update is another deployment, which needs a campaign of its own. None: nothing deployed."""
        for entry in self.stack.history(show_secrets=False):
            if entry.kind == "update" and entry.result == "succeeded":
                config = {key: value.value for key, value in (entry.config or {}).items()}
                return plan_digest(json.dumps({"version": entry.version, "config": config}, sort_keys=True).encode())
        return None

    def deployed_stage(self) -> str | None:
        """The stage the last successful update deployed, from the stack's `stage` output."""
        output = self.stack.outputs().get(STAGE_KEY)
        return str(output.value) if output is not None else None

    def stage_since(self, stage: str) -> datetime | None:
        """When `stage` went live: the end of the oldest successful update in the unbroken run of
        successful updates with that stage, newest first. A rollback to it starts the soak again."""
        since = None
        for entry in self.stack.history(show_secrets=False):
            if entry.kind != "update" or entry.result != "succeeded" or entry.end_time is None:
                continue
            config = entry.config.get(f"{self.stack.workspace.project_settings().name}:{STAGE_KEY}")
            if config is None or config.value != stage:
                break
            since = _utc(entry.end_time)
        return since


def _utc(moment: datetime) -> datetime:
    # The Automation API parses the CLI's `...Z` timestamps as naive datetimes.
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
