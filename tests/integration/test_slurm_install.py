"""The Slurm controller's install path, run as the deploy runs it, against Debian 12's real packages: the rendered
install script and its command (components.slurm.install) run as root in a copy-on-write overlay of this machine's
root, in private mount, UTS (hostname slurm-controller), network and PID namespaces, with the MUNGE key on stdin. The
packages it checks are the ones `make test` installs; munged, MariaDB, slurmdbd and slurmctld are the real daemons.
Only systemctl is faked (the container has no systemd as PID 1): it starts each daemon as its Debian unit does, no
more. The daemons' post-deploy check (scontrol ping, sacctmgr show cluster) runs against them."""

import base64
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from components.slurm.install import controller_command, controller_files, install_script
from tests.builders import parse, prod_values, with_changes
from tests.harness.artifacts import containers, missing
from tests.harness.figures import FIGURES
from tests.harness.slurm_cluster import slurm_marks

SKIP = missing()
pytestmark = [*slurm_marks(), *([pytest.mark.skip(reason=SKIP)] if SKIP else [])]

FAKE_SYSTEMCTL = r"""#!/bin/sh
# systemctl for a root without systemd: starts the real daemons as Debian 12's units do (ExecStart, User, Type).
state=/run/fake-systemd
mkdir -p $state && echo "$*" >> $state/calls
verb=$1; shift
[ "$1" = --now ] && { shift; verb=start; }
case $verb in daemon-reload|enable) exit 0 ;; start|restart) ;; *) echo "fake systemctl: $verb" >&2; exit 1 ;; esac
ready() {  # Type=notify and Type=forking: systemctl returns once the daemon is up
    i=0; until "$@" >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 300 ] || return 1; sleep 0.1; done
}
for unit in "$@"; do
    if [ -f $state/$unit.pid ]; then
        kill $(cat $state/$unit.pid) 2>/dev/null; ready sh -c "! kill -0 $(cat $state/$unit.pid)"
    fi
    case ${unit%.service} in
    munge)  # Type=forking, User=munge, RuntimeDirectory=munge (0755)
        install -d -o munge -g munge -m 0755 /run/munge && runuser -u munge -- /usr/sbin/munged || exit 1
        ready test -S /run/munge/munge.socket.2 && cp /run/munge/munged.pid $state/$unit.pid ;;
    mariadb)  # Type=notify, User=mysql
        install -d -o mysql -g mysql /run/mysqld
        setsid /usr/sbin/mariadbd --user=mysql > /var/log/mariadb-fake.log 2>&1 & echo $! > $state/$unit.pid
        ready mariadb -e 'SELECT 1' || exit 1 ;;
    slurmdbd|slurmctld)  # Type=simple: returns at once, as systemd does
        daemon=${unit%.service}
        setsid /usr/sbin/$daemon -D -s > /var/log/$daemon-fake.log 2>&1 & echo $! > $state/$unit.pid ;;
    *) ;;  # the stack's own units (the exporter): recorded only
    esac
done
"""

DRIVER = r"""set -u
root=$1; cases=$2; user=$3
mount -t tmpfs tmpfs $root
mkdir $root/upper $root/work $root/merged
mount -t overlay overlay -o lowerdir=/,upperdir=$root/upper,workdir=$root/work $root/merged
m=$root/merged
mount --rbind /dev $m/dev && mount -t proc proc $m/proc && mount -t tmpfs tmpfs $m/run && mount -t tmpfs tmpfs $m/tmp
hostname slurm-controller && ip link set lo up
# A host has an address off loopback; glibc's AI_ADDRCONFIG, which Slurm asks for, resolves nothing without one.
ip addr add 10.255.0.1/32 dev lo
echo '127.0.0.1 slurm-controller' >> $m/etc/hosts
cp $cases/systemctl $m/usr/bin/systemctl
for case in $(ls $cases | grep -v systemctl | sort); do
    cp $cases/$case/script $m/tmp/deploy.sh
    start=$(date +%s.%N)
    chroot $m /bin/sh /tmp/deploy.sh < $cases/$case/stdin > $cases/$case/stdout 2> $cases/$case/stderr
    echo $? > $cases/$case/rc
    echo "$start $(date +%s.%N)" > $cases/$case/seconds
done
chroot $m sh -c "stat -c '%U %a %s' /etc/munge/munge.key; mariadb -N -e \"SHOW GRANTS FOR '$user'@'localhost'\";
  getent passwd $user; stat -c 'owner %U:%G' /etc/slurm/slurmdbd.conf; ps -o user= -C slurmctld,slurmdbd;
  timeout 10 scontrol ping; timeout 10 sacctmgr --noheader --parsable2 show cluster format=cluster;
  cat /etc/apt/sources.list.d/gpucluster-slurm.list" > $cases/after 2>&1
for pid in $(cat $m/run/fake-systemd/*.pid 2>/dev/null); do kill $pid 2>/dev/null; done
for pid in $(cat $m/run/fake-systemd/*.pid 2>/dev/null); do
    i=0; while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
done
"""


def munge_key(size: int) -> bytes:
    return base64.b64encode(secrets.token_bytes(size)) + b"\n"


def test_should_install_slurm_from_the_spec_and_prove_the_daemons_answer(tmp_path: Path) -> None:
    # The test stack: prod, with enroot and Pyxis from the packages `make artifacts` built (a file:// mirror), and a
    # SlurmUser Debian's packages do not make (they make `slurm`): the deploy makes it.
    test_stack = with_changes(prod_values(), slurm__containers=containers(), slurm__slurm_user="gpuslurm")
    site = parse(test_stack)
    too_old = parse(with_changes(test_stack, slurm__package_version="22.05.9-1"))
    short_key = munge_key(16)
    cases = {
        "1-other-version": (install_script(controller_files(too_old), controller_command(too_old)), munge_key(128)),
        "2-short-key": (install_script(controller_files(site), controller_command(site)), short_key),
        "3-deploy": (install_script(controller_files(site), controller_command(site)), munge_key(128)),
    }
    root, given = tmp_path / "root", tmp_path / "cases"
    root.mkdir()
    given.mkdir()
    (given / "systemctl").write_text(FAKE_SYSTEMCTL)
    (given / "systemctl").chmod(0o755)
    for name, (script, stdin) in cases.items():
        (given / name).mkdir()
        (given / name / "script").write_text(script)
        (given / name / "stdin").write_bytes(stdin)
    started = time.monotonic()
    # The driver is PID 1 of its own PID namespace: when it ends, however it ends, the kernel ends every daemon.
    subprocess.run(["unshare", "--mount", "--uts", "--net", "--pid", "--fork", "--", "sh", "-c", DRIVER, "driver",
                    str(root), str(given), site.slurm.slurm_user], check=True, timeout=120)
    out = {name: {part: (given / name / part).read_text() for part in ("rc", "stdout", "stderr", "seconds")}
           for name in cases}

    other = out["1-other-version"]
    assert other["rc"].strip() == "1"
    # apt was asked for exactly the spec's version (this namespace has no network: apt's archive has none to give),
    # and the deploy stops saying what is installed.
    assert "Version '22.05.9-1' for 'slurmctld' was not found" in other["stderr"], other["stderr"]
    assert "slurm.package_version: 22.05.9-1 is not what is installed: " in other["stderr"], other["stderr"]
    assert "slurmctld ii 22.05.8-4+deb12u3" in other["stderr"], other["stderr"]

    short = out["2-short-key"]
    assert short["rc"].strip() == "1"
    assert "munge_key: 16 bytes; a MUNGE key has 32 to 1024 (mungekey -c)" in short["stderr"]
    assert short_key.strip().decode() not in short["stderr"] + short["stdout"]

    deploy = out["3-deploy"]
    assert deploy["rc"].strip() == "0", deploy["stderr"][-3000:]
    begin, end = map(float, deploy["seconds"].split())
    after = (given / "after").read_text().splitlines()
    assert after[0] == "munge 400 128", after
    assert any("IDENTIFIED VIA unix_socket" in line for line in after), after
    assert any("GRANT ALL PRIVILEGES ON `slurm_acct_db`.* TO `gpuslurm`@`localhost`" in line for line in after), after
    user = next(line.split(":") for line in after if line.startswith("gpuslurm:"))
    assert int(user[2]) < 1000 and user[6] == "/usr/sbin/nologin", user  # a system user, no login
    assert "owner gpuslurm:gpuslurm" in after, after
    assert sorted(line.strip() for line in after if line.strip() == "gpuslurm") == ["gpuslurm", "gpuslurm"], after
    assert any(line.endswith("is UP") for line in after), after
    assert site.site_name in after, after
    assert site.slurm.package_source in after, after
    FIGURES.append(f"Slurm controller install (packages checked, MUNGE key, MariaDB database, slurmdbd + slurmctld "
                   f"answering) in {end - begin:.1f} s; the whole overlay run {time.monotonic() - started:.1f} s")
