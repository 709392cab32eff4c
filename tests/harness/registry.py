"""A site's registry on loopback: Debian's docker-registry (distribution 2.8) as a plain process with a config of its
own, and an image built without a container engine (umoci), as ../shared/notes/local-registry.md records."""

import shutil
import subprocess
import urllib.request
from pathlib import Path

from tests.harness.daemons import free_ports, stop_all, wait_for

DOCKER_REGISTRY, SKOPEO, UMOCI, BUSYBOX = (shutil.which(tool) for tool in ("docker-registry", "skopeo", "umoci",
                                                                            "busybox"))
STARTUP_TIMEOUT_S = 20.0
COMMAND_TIMEOUT_S = 60
"""s one umoci or skopeo command may take (each takes well under a second here)."""


def missing() -> str | None:
    absent = [name for name, path in (("docker-registry", DOCKER_REGISTRY), ("skopeo", SKOPEO), ("umoci", UMOCI),
                                      ("busybox", BUSYBOX)) if path is None]
    return f"needs {', '.join(absent)}: make test installs them (APT_TEST_PACKAGES)" if absent else None


class LocalRegistry:
    """docker-registry serving HTTP (no TLS) on 127.0.0.1, its storage in `directory`."""

    def __init__(self, directory: Path) -> None:
        assert DOCKER_REGISTRY is not None
        (port,) = free_ports(1)
        self.address = f"127.0.0.1:{port}"
        config = directory / "config.yml"
        config.write_text(f"version: 0.1\nstorage: {{filesystem: {{rootdirectory: {directory / 'data'}}}}}\n"
                          f"http: {{addr: {self.address}}}\nlog: {{level: warn}}\n")
        self.process = subprocess.Popen([DOCKER_REGISTRY, "serve", str(config)], stdout=subprocess.DEVNULL,
                                        stderr=(directory / "registry.log").open("w"))
        wait_for("docker-registry to answer GET /v2/", self._answers, STARTUP_TIMEOUT_S, interval_s=0.1)

    def _answers(self) -> bool:
        assert self.process.poll() is None, "docker-registry exited"
        try:
            with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        stop_all([self.process])


def run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"
    return done.stdout


def tiny_image(directory: Path) -> str:
    """An OCI layout holding one image (`tiny`): a rootfs of busybox alone. Its `oci:` reference for skopeo."""
    assert UMOCI is not None and BUSYBOX is not None
    layout, bundle = directory / "layout", directory / "bundle"
    run([UMOCI, "init", "--layout", str(layout)])
    run([UMOCI, "new", "--image", f"{layout}:tiny"])
    run([UMOCI, "unpack", "--rootless", "--image", f"{layout}:tiny", str(bundle)])
    shutil.copy(BUSYBOX, bundle / "rootfs" / "busybox")
    run([UMOCI, "repack", "--image", f"{layout}:tiny", str(bundle)])
    return f"oci:{layout}:tiny"
