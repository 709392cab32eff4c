"""The Secret a gateway account's workloads read their key from (`api-key`), read and written with kubectl, the
kubeconfig the stack's Kubernetes provider uses (KUBECONFIG or the current context), as `gpuctl gateway` reaches the
gateway itself (runbooks/gateway/reach.py).

The key never enters an argument list (process listings show those): it is read from kubectl's stdout and written
through its stdin (`--patch-file /dev/stdin`). Each call is bounded in time.
"""

import base64
import binascii
import json
import subprocess

from runbooks.gateway.teams import GatewayError

KEY_FIELD = "api-key"
"""The Secret's key the workloads read (components/inference/component.py writes it)."""
KUBECTL_TIMEOUT_S = 30.0


def _kubectl(argv: list[str], stdin: str = "") -> str:
    what = f"`{' '.join(argv)}`"
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_S,
                              check=False)
    except OSError as error:
        raise GatewayError(f"{what}: cannot run {argv[0]} ({error.strerror})") from None
    except subprocess.TimeoutExpired:
        raise GatewayError(f"{what}: no answer within {KUBECTL_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise GatewayError(f"{what} failed: {lines[-1] if lines else f'exit {done.returncode}'}")
    return done.stdout


def read_key(name: str, namespace: str, kubectl: str = "kubectl") -> str | None:
    """The key the Secret holds now; None when the Secret or its field is not there."""
    encoded = _kubectl([kubectl, "get", "secret", name, "--namespace", namespace, "--ignore-not-found",
                        "--output", f"jsonpath={{.data.{KEY_FIELD}}}"]).strip()
    if not encoded:
        return None
    try:
        return base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise GatewayError(f"Secret {namespace}/{name}: {KEY_FIELD} is not base64 of UTF-8 text") from None


def write_key(name: str, namespace: str, key: str, kubectl: str = "kubectl") -> None:
    """Replaces the key in the Secret (its other fields stay); the pods that mount it see the new one."""
    _kubectl([kubectl, "patch", "secret", name, "--namespace", namespace, "--type", "merge",
              "--patch-file", "/dev/stdin"], json.dumps({"stringData": {KEY_FIELD: key}}))
