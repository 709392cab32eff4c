"""`kubectl port-forward --namespace NS service/NAME :PORT --address 127.0.0.1` as kubectl answers it, forwarding to a
double instead of a pod, and `kubectl get secret` / `kubectl patch secret` (the calls runbooks/gateway/key_secret.py
makes) over a JSON file: no API server runs here. Every call's argv goes to FAKE_KUBECTL_LOG (one JSON line), and
"stopped" when it is told to stop.

FAKE_KUBECTL_SECRETS: a JSON file {"<namespace>/<name>": {"<field>": "<value>"}}, the Secrets there are (stringData).

FAKE_KUBECTL_SERVICES: the Services there are, `<namespace>/<name>:<port>` separated by spaces; anything else fails
as kubectl does (`error: services "<name>" not found`, exit 1). FAKE_KUBECTL_TARGET: `host:port` every forwarded
connection goes to. Stdlib only: run as a program, by `kubectl` on PATH (tests/runbooks/gateway/test_cli.py).
"""

import base64
import json
import os
import signal
import socket
import sys
import threading
from types import FrameType


def pipe(source: socket.socket, sink: socket.socket) -> None:
    # The kernel hands a process's SIGTERM to any thread not blocking it; here one blocked in recv would take it and
    # leave the main thread in accept(), where Python never runs the handler (the stop went unlogged under load).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        sink.close()


def secret(args: list[str]) -> int:
    """get: `get secret NAME --namespace NS --ignore-not-found --output jsonpath={.data.FIELD}`; patch: `patch secret
    NAME --namespace NS --type merge --patch-file /dev/stdin`, a merge of stringData."""
    path = os.environ["FAKE_KUBECTL_SECRETS"]
    with open(path) as held:
        secrets: dict[str, dict[str, str]] = json.load(held)
    where = f"{args[args.index('--namespace') + 1]}/{args[2]}"
    if args[0] == "get":
        field = args[args.index("--output") + 1].removeprefix("jsonpath={.data.").removesuffix("}")
        value = secrets.get(where, {}).get(field)
        print(base64.b64encode(value.encode()).decode() if value is not None else "", end="")
        return 0
    if where not in secrets:
        print(f'Error from server (NotFound): secrets "{args[2]}" not found', file=sys.stderr)
        return 1
    assert args[3:] == ["--namespace", where.split("/")[0], "--type", "merge", "--patch-file", "/dev/stdin"], args
    secrets[where].update(json.load(sys.stdin)["stringData"])
    with open(path, "w") as held:
        json.dump(secrets, held)
    print(f"secret/{args[2]} patched")
    return 0


def main() -> int:
    with open(os.environ["FAKE_KUBECTL_LOG"], "a") as log:
        log.write(json.dumps(sys.argv[1:]) + "\n")
    args = sys.argv[1:]
    if args[:2] in (["get", "secret"], ["patch", "secret"]):
        return secret(args)
    if len(args) != 7 or args[:2] != ["port-forward", "--namespace"] or args[5:] != ["--address", "127.0.0.1"]:
        print(f"fake kubectl: unexpected arguments {args}", file=sys.stderr)
        return 2
    namespace, name, port = args[2], args[3].removeprefix("service/"), args[4].removeprefix(":")
    if f"{namespace}/{name}:{port}" not in os.environ["FAKE_KUBECTL_SERVICES"].split():
        print(f'error: services "{name}" not found', file=sys.stderr)
        return 1
    host, target = os.environ["FAKE_KUBECTL_TARGET"].rsplit(":", 1)
    listener = socket.create_server(("127.0.0.1", 0))

    def stop(signum: int, frame: FrameType | None) -> None:
        with open(os.environ["FAKE_KUBECTL_LOG"], "a") as log:
            log.write("stopped\n")
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    print(f"Forwarding from 127.0.0.1:{listener.getsockname()[1]} -> {port}", flush=True)
    while True:
        client, _ = listener.accept()
        print(f"Handling connection for {port}", flush=True)
        upstream = socket.create_connection((host, int(target)))
        threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
