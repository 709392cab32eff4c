"""The acceptance gate: no stage is requested (no team onboarded) until a passed full-length campaign exists for the
deployed stack, bound to its deployment digest in the keyed audit log as approvals are bound to a plan's digest."""

from runbooks.rollout.audit import AuditLog
from runbooks.rollout.machine import ACCEPTANCE_RECORD
from tests.runbooks.rollout.conftest import Harness, run


def redeploy(harness: Harness) -> None:
    """Someone updates the stack after the campaign: another deployment, which the campaign did not judge."""
    harness.pulumi._record_update("pulumi up by hand", "succeeded", harness.clock(), {"update": 1})


def test_should_refuse_a_request_when_the_campaign_judged_another_deployment(gpuctl: Harness) -> None:
    redeploy(gpuctl)
    digest = gpuctl.runbook.deployer.deployment_digest()
    code, text = run(gpuctl, "request", "half")
    assert code == 2, text
    assert f"refused: no team is onboarded before acceptance: no passed acceptance campaign for the deployed " \
           f"stack {digest}: run `gpuctl acceptance run`" in " ".join(text.split())
    assert gpuctl.pulumi.previews() == [], "nothing is previewed for a refused request"
    code, text = run(gpuctl, "status")
    assert code == 0 and "acceptance: no passed acceptance campaign for the deployed stack" in text


def test_should_not_count_a_rehearsal_at_a_time_scale(gpuctl: Harness) -> None:
    redeploy(gpuctl)
    gpuctl.accept(time_scale=0.01)
    code, text = run(gpuctl, "request", "half")
    assert code == 2 and "rehearsals do not count: campaign-at-0.01 at time scale 0.01" in " ".join(text.split())


def test_should_not_count_a_campaign_recorded_without_the_audit_key(gpuctl: Harness) -> None:
    redeploy(gpuctl)
    forged = AuditLog(gpuctl.audit.path, b"not-the-key-" * 4)
    forged.append(who="gpuctl acceptance", what=ACCEPTANCE_RECORD, decision="passed",
                  plan_digest=gpuctl.runbook.deployer.deployment_digest(),
                  detail={"campaign": "forged", "time_scale": 1.0})
    code, text = run(gpuctl, "request", "half")
    assert code == 2 and "no passed acceptance campaign" in text


def test_should_request_once_a_full_campaign_passed_for_the_deployment(gpuctl: Harness) -> None:
    redeploy(gpuctl)
    gpuctl.accept()
    code, text = run(gpuctl, "request", "half")
    assert code == 0 and "half-1: awaiting approval" in text, text
