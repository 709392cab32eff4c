"""The one table of exit codes for every gpuctl command (the README lists it). Standard library only: the
console script exits through it even when a package the rest of gpuctl needs is missing."""

from enum import IntEnum


class ExitCode(IntEnum):
    DONE = 0
    FAILED = 1
    """The program, a child it started (the policy pack, a consumer) or a command it ran (Slurm, kubectl, Pulumi)
    failed, or a consumer rejected a generated file: look at the error; running again may help."""
    INVALID = 2
    """The input is invalid or the command does not apply: the stack file or site spec (every problem listed), an
    option, the policy config, a stage or rollout that is not there. Change the input."""
    HELD = 3
    """A check holds it: a mandatory policy (plan), the soak, gates or approvals (rollout), nodes not drained or
    pods not evicted yet (flex). The output says which; run it again once that has changed."""
    ENDED = 4
    """The rollout ended without advancing: rejected, failed or rolled back; or the acceptance campaign failed."""
