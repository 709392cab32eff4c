"""Preemption: Kubernetes priority classes rank production > staging > dev; no Slurm QoS preempts protected work.

Priority classes are judged on their outputs (`metadata.name`, `value`); Slurm QoS on the
`gpucluster:slurm:Slurm` component's outputs `qos: [{name, priority, preempt: [names]}]` (docs/policy.md).
"""

from common import (
    SLURM_TYPE,
    ViolationError,
    config_names,
    describe,
    items,
    number,
    of_type,
    present,
    report_each,
    text,
)
from pulumi_policy import (
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

PRIORITY_CLASS_TYPE = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
PRIORITY_TIERS = ("production", "staging", "dev")
"""PriorityClass names, highest first."""
PROTECTED_QOS = ("inference", "critical")
"""Slurm QoS whose jobs no other QoS may preempt."""


def validate_priority_order(args: StackValidationArgs, report: ReportViolation) -> None:
    tiers = config_names(args, "tiers", PRIORITY_TIERS)
    by_name: dict[str, PolicyResource] = {}
    for pc in of_type(args, PRIORITY_CLASS_TYPE):
        try:
            name = text(pc, "metadata.name")
        except ViolationError as problem:
            report(str(problem), pc.urn)
            continue
        if name in tiers:
            by_name[name] = pc
    if not by_name:
        args.not_applicable(f"no PriorityClass named {', '.join(tiers)}")
    missing = [t for t in tiers if t not in by_name]
    if missing:
        report(f"PriorityClasses {', '.join(sorted(by_name))} exist without {', '.join(missing)}; "
               f"define all of {' > '.join(tiers)}", None)
        return
    try:
        values = [(t, number(by_name[t], "value")) for t in tiers]
    except ViolationError as problem:
        report(str(problem), None)
        return
    for (higher, high), (lower, low) in zip(values, values[1:], strict=False):
        if high <= low:
            report(f"PriorityClass {higher} has value {high:g}, not above {lower} at {low:g}", by_name[higher].urn)


def validate_protected_qos(args: StackValidationArgs, report: ReportViolation) -> None:
    protected = config_names(args, "protected", PROTECTED_QOS)

    def check(slurm: PolicyResource) -> None:
        offences = []
        for qos in items(slurm, "qos"):
            preempts = qos.get("preempt") if isinstance(qos, dict) else None
            if not isinstance(preempts, list):
                raise ViolationError(f"{describe(slurm)}: qos entry {qos!r} has no preempt list")
            offences += [f"{qos.get('name')} preempts {victim}" for victim in preempts if victim in protected]
        if offences:
            raise ViolationError(f"{describe(slurm)}: QoS {', '.join(offences)}; "
                                 f"{', '.join(protected)} must never be preempted")

    report_each(present(args, SLURM_TYPE), report, check)


PRIORITY_CLASSES_ORDERED = StackValidationPolicy(
    name="priority-classes-ordered",
    description="Kubernetes PriorityClasses rank production above staging above dev by value.",
    validate=validate_priority_order,
    config_schema=PolicyConfigSchema(properties={
        "tiers": {"type": "array", "items": {"type": "string"}, "default": list(PRIORITY_TIERS),
                  "description": "PriorityClass names, highest first"},
    }),
)
PROTECTED_QOS_NOT_PREEMPTED = StackValidationPolicy(
    name="protected-qos-not-preempted",
    description="No Slurm QoS may preempt the inference or critical QoS.",
    validate=validate_protected_qos,
    config_schema=PolicyConfigSchema(properties={
        "protected": {"type": "array", "items": {"type": "string"}, "default": list(PROTECTED_QOS),
                      "description": "QoS names no other QoS may preempt"},
    }),
)

POLICIES = [PRIORITY_CLASSES_ORDERED, PROTECTED_QOS_NOT_PREEMPTED]
