"""How `gpuctl gateway` reaches the gateway's admin API from where `pulumi up` runs it: the Pulumi host, outside the
cluster, where an in-cluster name such as `llm-gateway-litellm.inference.svc` resolves to nothing.

A URL whose host is a Service's in-cluster name (`<service>.<namespace>.svc[.cluster.local]`) is reached through
`kubectl port-forward` to that Service, with the kubeconfig the stack's Kubernetes provider uses (KUBECONFIG or the
current context), on a free port of 127.0.0.1, for the command's duration; any other URL (an internal ingress) is
called as it is. The forward needs the gateway's pods running: the accounts are created after the gateway's release,
which waits for them.
"""

import re
import select
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from runbooks.gateway.teams import GatewayError

IN_CLUSTER = re.compile(r"(?P<service>[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)\.(?P<namespace>[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)"
                        r"\.svc(?:\.cluster\.local)?\.?")
FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(?P<port>\d+) -> \d+")
"""kubectl's first line once the local port listens (staging/src/k8s.io/client-go/tools/portforward)."""
FORWARD_TIMEOUT_S = 30.0
"""s kubectl may take to find a ready pod behind the Service and open the local port."""
STOP_TIMEOUT_S = 10.0


def _first_line(process: "subprocess.Popen[str]", timeout_s: float) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    while process.poll() is None:
        ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            return process.stdout.readline().strip()
        if time.monotonic() >= deadline:
            return ""
    return ""


@contextmanager
def reachable(url: str, kubectl: str = "kubectl") -> Iterator[str]:
    """Yields a URL that reaches `url` from here: a port-forward's for an in-cluster Service, else `url` itself."""
    parts = urlsplit(url)
    service = IN_CLUSTER.fullmatch(parts.hostname or "")
    if service is None:
        yield url
        return
    port = parts.port or {"http": 80, "https": 443}[parts.scheme]
    argv = [kubectl, "port-forward", "--namespace", service["namespace"], f"service/{service['service']}",
            f":{port}", "--address", "127.0.0.1"]
    what = f"`{' '.join(argv[1:])}`"
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
    except OSError as error:
        raise GatewayError(f"{what}: cannot run {kubectl} ({error.strerror}); the gateway at {url} is reached "
                           "through it from outside the cluster") from None
    try:
        forwarding = FORWARDING.fullmatch(_first_line(process, FORWARD_TIMEOUT_S))
        if forwarding is None:
            process.kill()
            _, stderr = process.communicate(timeout=STOP_TIMEOUT_S)
            detail = stderr.strip().splitlines()[-1] if stderr.strip() else f"no forward within {FORWARD_TIMEOUT_S:g} s"
            raise GatewayError(f"{what} failed: {detail}")
        yield parts._replace(netloc=f"127.0.0.1:{forwarding['port']}").geturl()
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
