"""The acceptance gate: no stage is requested (no team onboarded) until a campaign exists for the deployed stack, bound
to its deployment digest in the keyed audit log as approvals are bound to a plan's digest, whose record shows every
criterion of its verdict passed over the full durations (the verdict is read, not the time scale)."""

import pytest
import yaml

from runbooks.stack.audit import ACCEPTANCE_RECORD, AuditLog
from tests.builders import REPO
from tests.runbooks.rollout.conftest import APPROVERS, Harness, run


def redeploy(harness: Harness) -> None:
    """Someone updates the stack after the campaign: another deployment, which the campaign did not judge."""
    harness.pulumi._record_update("pulumi up by hand", "succeeded", harness.clock(), {"update": 1})


def test_should_hold_a_request_with_exit_3_when_the_campaign_judged_another_deployment(gpuctl: Harness) -> None:
    redeploy(gpuctl)
    digest = gpuctl.machine.deployer.deployment_digest()
    code, text = run(gpuctl, "request", "half")
    assert code == 3, text
    assert f'held: held at "check_acceptance" step: no team is onboarded before acceptance: no passed acceptance ' \
           f"campaign for the deployed stack {digest}: run `gpuctl acceptance run`" in " ".join(text.split())
    assert gpuctl.pulumi.previews() == [], "nothing is previewed for a refused request"
    code, text = run(gpuctl, "status")
    assert code == 0 and "acceptance: no passed acceptance campaign for the deployed stack" in text


def test_should_not_count_a_rehearsal_at_a_time_scale(gpuctl: Harness) -> None:
    redeploy(gpuctl)
    gpuctl.accept(time_scale=0.01)
    code, text = run(gpuctl, "request", "half")
    assert code == 3 and "(not counted: campaign-at-0.01: a rehearsal at time scale 0.01)" in " ".join(text.split())


def test_should_not_count_an_hour_long_campaign_with_2_s_drills_at_time_scale_1(gpuctl: Harness) -> None:
    # The case: time_scale 1, so the old gate let it through, though it soaked an hour and drilled for 2 s.
    redeploy(gpuctl)
    holds = {name: 2.0 for name, _ in gpuctl.site.acceptance.named_drills()}
    gpuctl.accept(soak_s=3600.0, shock_s=2.0, drill_hold_s=holds)
    code, text = run(gpuctl, "request", "half")
    said = " ".join(text.split())
    assert code == 3 and "soak 3600.0 s under load, not the 604800 s asked" in said, said
    assert "shock 2.0 s, not the 3600 s asked" in said and "drill node_failure held 2.0 s, not the 1800 s asked" in said


def test_should_not_count_a_campaign_that_failed_a_criterion_or_never_judged_one(gpuctl: Harness) -> None:
    redeploy(gpuctl)
    gpuctl.accept(failed=("shock inference p95 latency",))
    digest = gpuctl.machine.deployer.deployment_digest()
    # A record from before verdicts were measured: a time scale and nothing else.
    gpuctl.audit.append(who="gpuctl acceptance", what=ACCEPTANCE_RECORD, decision="passed", plan_digest=digest,
                        detail={"campaign": "unmeasured", "time_scale": 1})
    code, text = run(gpuctl, "request", "half")
    said = " ".join(text.split())
    assert code == 3 and "campaign-at-1: shock inference p95 latency not passed" in said, said
    assert "unmeasured: its record holds no verdict criteria" in said


def test_should_not_count_a_campaign_recorded_without_the_audit_key(gpuctl: Harness) -> None:
    redeploy(gpuctl)
    forged = AuditLog(gpuctl.audit.path, b"not-the-key-" * 4)
    forged.append(who="gpuctl acceptance", what=ACCEPTANCE_RECORD, decision="passed",
                  plan_digest=gpuctl.machine.deployer.deployment_digest(),
                  detail={"campaign": "forged", "time_scale": 1.0})
    code, text = run(gpuctl, "request", "half")
    assert code == 3 and "no passed acceptance campaign" in text


def test_should_request_once_a_full_campaign_passed_for_the_deployment(gpuctl: Harness) -> None:
    redeploy(gpuctl)
    gpuctl.accept()
    code, text = run(gpuctl, "request", "half")
    assert code == 0 and "half-1: awaiting approval" in text, text


@pytest.fixture
def first_up(gpuctl: Harness) -> Harness:
    """The stack as the first plain `pulumi up` of the shipped Pulumi.prod.yaml leaves it: its stage (platform, no
    team) deployed, a deployment no campaign has judged yet."""
    shipped = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"]["gpu-cluster:stage"]
    gpuctl.pulumi.config["gpu-cluster:stage"] = shipped
    gpuctl.pulumi._record_update("pulumi up", "succeeded", gpuctl.clock(), {"create": 400})
    return gpuctl


def test_should_hold_the_canary_request_after_the_first_up_with_exit_3(first_up: Harness) -> None:
    code, text = run(first_up, "status")
    assert code == 0 and "stage platform deployed" in text, text
    assert "next stage: canary (onboards nlp-foundation, speech; 2 of 12 teams)" in text
    code, text = run(first_up, "request", "canary")
    assert code == 3 and "no team is onboarded before acceptance: no passed acceptance campaign for the deployed " \
                         "stack" in " ".join(text.split()), text
    assert first_up.pulumi.previews() == [], "nothing is previewed for a held request"
    assert first_up.pulumi.config["gpu-cluster:stage"] == "platform"


def test_should_onboard_the_canary_only_after_a_passed_campaign_and_its_approvals(first_up: Harness) -> None:
    first_up.accept()
    code, text = run(first_up, "request", "canary")
    assert code == 0 and "canary-1: awaiting approval" in text, text
    # Without its approvals (2 distinct) the canary is not applied: refused, nothing deployed.
    first_up.build()
    for approvals in range(2):
        code, text = run(first_up, "apply")
        assert code == 2 and "nothing to apply: canary-1 is awaiting_approval" in text, (approvals, text)
        assert first_up.pulumi.ups() == []
        first_up.click(APPROVERS[approvals])
    code, text = run(first_up, "apply")
    assert code == 0, text
    assert first_up.pulumi.outputs["stage"] == "canary"
