"""The drill's dead-man's switch: fires the undo at its deadline unless disarmed; trusts no file others can write."""

import json
import subprocess
import sys
import time
from pathlib import Path

from hosts import drill_revert
from runbooks.acceptance.faults import Fault, Switches

SWITCH = drill_revert.__file__


def test_should_run_the_undo_at_the_deadline_after_its_arming_process_is_gone(tmp_path: Path) -> None:
    marker = tmp_path / "fault-in-place"
    marker.touch()
    switches = Switches(tmp_path / "switches")
    armed = switches.arm(Fault("network_partition", "test", (), (("rm", str(marker)),)), "drill", time.time() + 0.5)
    # Switches.arm returned: the process that armed it has exited; the detached switch still watches.
    assert marker.exists()
    assert Switches.wait_gone(armed, timeout_s=10)
    assert not marker.exists()
    fired = Switches.fired(armed)
    assert fired is not None and fired["results"] == [{"argv": ["rm", str(marker)], "rc": 0, "output": ""}]


def test_should_not_fire_once_disarmed(tmp_path: Path) -> None:
    marker = tmp_path / "fault-in-place"
    marker.touch()
    switches = Switches(tmp_path / "switches")
    armed = switches.arm(Fault("storage_jitter", "test", (), (("rm", str(marker)),)), "drill", time.time() + 0.5)
    assert Switches.disarm(armed)
    time.sleep(1.5)  # past the deadline and a poll: the switch saw the file gone and ended
    assert marker.exists() and Switches.fired(armed) is None


def test_should_refuse_an_armed_file_others_can_write(tmp_path: Path) -> None:
    directory = tmp_path / "open"
    directory.mkdir()
    directory.chmod(0o777)
    armed = directory / "drill.json"
    armed.write_text(json.dumps({"deadline": time.time(), "undo": [["true"]]}))
    done = subprocess.run([sys.executable, SWITCH, "--arm", str(armed), "--foreground"], capture_output=True,
                          text=True, timeout=10, check=False)
    assert done.returncode == 2 and "writable by no one else" in done.stderr
    assert armed.exists(), "a refused switch touches nothing"
