"""The Slack HTTP receiver against 2,000 idle connections (issue 41: about a thousand stalled ones kept every genuine
click out): with the descriptor limit a service has, a signed click still gets its ack and is counted."""

import time
from collections.abc import Callable

from runbooks.rollout.receivers import HttpReceiver
from tests.harness.idle_connections import idle_connections, service_limit
from tests.runbooks.rollout.conftest import APPROVERS, REQUESTER, SIGNING_SECRET, Harness, block_actions
from tests.runbooks.rollout.test_security import post

IDLE = 2000


def test_should_count_a_genuine_click_while_2000_idle_connections_are_held(
        harness: Harness, report_figure: Callable[[str], None]) -> None:
    harness.machine.request("half", REQUESTER)
    with service_limit():
        receiver = HttpReceiver(SIGNING_SECRET, harness.inbox(), harness.store, harness.audit)
        receiver.start()
        try:
            host, port = receiver.url.split("/")[2].split(":")
            with idle_connections(host, int(port), IDLE) as connected:
                started = time.monotonic()
                status = post(receiver, block_actions(harness.slack, APPROVERS[0], "approve"))
                took = time.monotonic() - started
        finally:
            receiver.stop()
    report_figure(f"slack HTTP receiver with {connected} of {IDLE} idle connections held: a signed click acked and "
                  f"decided in {took * 1000:.0f} ms")
    assert connected > 1024  # more than a service's descriptors: the holder was not stopped short
    assert status == 200 and [a.user for a in harness.approvals.counted("half-1")] == [APPROVERS[0]]
