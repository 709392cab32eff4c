"""The audit log: append-only JSONL, each record chained to the one before by an HMAC-SHA256 under a secret key.

Every record carries who, what, when, the rollout and stage, the plan digest and gate snapshot where there is
one, and the decision. Its `mac` covers all of that and the previous record's `mac`, so editing, reordering or
deleting a record breaks the chain at that line, and without the key no one can write a chain that verifies
(recomputing plain hashes is not enough). Deleting the newest records leaves a shorter chain that still
verifies on its own: the chain's head is therefore also kept elsewhere (in the rollout state, tagged with the
key, and posted to the request's Slack thread), and `verify` checks the log against those anchors.

A last line without its newline is a write that a crash or a full disk cut short (the record never counted: a
caller acts only after `append` returns). It is reported by `verify` and set aside by the next `append` (its
bytes moved to `<log>.torn`, a record saying so), so a torn line never stops the break-glass rollback.

Secrets never enter a record: callers pass identities and facts, not credentials. The key is never logged.
"""

import errno
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

GENESIS = "0" * 64
"""The `prev` of the first record."""

KEY_ENV = "GPUCTL_AUDIT_KEY"
"""The audit key as a string of at least MIN_KEY_CHARS characters; when unset, the key file is used."""
KEY_FILE_ENV = "GPUCTL_AUDIT_KEY_FILE"
"""Where the key file is, when not at DEFAULT_KEY_FILE."""
DEFAULT_KEY_FILE = Path("/etc/gpucluster/audit.key")
"""32 random bytes (hex), made mode 0600 on first use when KEY_ENV is unset, in a folder made 0700: apart from the
state it protects, so whoever can write the state dir cannot also read the key and re-chain the log."""
STATE_DIR_KEY = "audit.key"
"""Where earlier versions kept the key: in the state dir, beside the log. A key found there is refused."""
MAX_KEY_FILE_BYTES = 4096
MIN_KEY_CHARS = 32
HEAD_PREFIX = "audit chain head:"
"""How a posted head starts: `audit chain head: record <seq> mac <mac>`."""
ACCEPTANCE_RECORD = "acceptance.campaign"
"""What `gpuctl acceptance` appends to this audit log when a campaign passes; its plan_digest is the deployment it
judged (StackDeployer.deployment_digest), its detail the campaign, its time scale, every criterion of its verdict
(runbooks.acceptance.verdict: name, phase, passed, measured, objective, source) and what it measured (`measured`:
soak_s and shock_s under load, drill_hold_s per drill by its name: Acceptance.named_drills)."""


class AuditKeyError(Exception):
    """The key cannot be had or is too weak to trust; the message names the variable or file and the rule."""


class AuditChainBrokenError(Exception):
    """The chain is broken: a record was edited, reordered or removed, or the log is shorter than an anchor."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"audit log line {line}: {reason}")
        self.line = line


@dataclass(frozen=True)
class ChainHead:
    seq: int
    mac: str

    def text(self) -> str:
        return f"{HEAD_PREFIX} record {self.seq} mac {self.mac}"

    @classmethod
    def parse(cls, text: str) -> "ChainHead | None":
        words = text.removeprefix(HEAD_PREFIX).split()
        if not text.startswith(HEAD_PREFIX) or len(words) != 4 or words[0] != "record" or words[2] != "mac":
            return None
        return cls(int(words[1]), words[3]) if words[1].isdigit() else None


class HeadKeeper(Protocol):
    """Where the newest head is kept beside the log (the rollout state), with a tag only the key can make."""

    def keep_audit_head(self, head: ChainHead, tag: str) -> None: ...
    def audit_head(self) -> tuple[ChainHead, str] | None: ...


@dataclass(frozen=True)
class AuditRecord:
    seq: int
    at: str
    who: str
    what: str
    rollout: str | None
    stage: str | None
    decision: str
    plan_digest: str | None
    gates: dict[str, Any] | None
    detail: dict[str, Any]
    prev: str
    mac: str


@dataclass(frozen=True)
class ChainReport:
    records: int
    torn_bytes: int
    """Bytes of an unterminated last line (0: none); the next append sets them aside."""
    anchors: tuple[str, ...]
    """Where the heads the log was checked against came from."""


def audit_key(state_dir: Path, environ: Mapping[str, str] = os.environ) -> bytes:
    """The key: KEY_ENV if set, else the key file (KEY_FILE_ENV, default DEFAULT_KEY_FILE), made on first use. The
    file is opened from its folder's descriptor without following a link, and refused unless both are the caller's
    alone (fstat on what was opened); a key in the state dir `state_dir`, where earlier versions kept it, is refused."""
    given = environ.get(KEY_ENV)
    if given is not None:
        if len(given) < MIN_KEY_CHARS:
            raise AuditKeyError(f"{KEY_ENV} must be at least {MIN_KEY_CHARS} characters (it has {len(given)})")
        return given.encode()
    path = Path(environ.get(KEY_FILE_ENV) or DEFAULT_KEY_FILE)
    beside = state_dir / STATE_DIR_KEY
    if os.path.lexists(beside):
        raise AuditKeyError(f"{beside}: the audit key sits beside the state it protects; move it out of the state dir: "
                            f"`install -D -m 600 {beside} {path} && rm {beside}` (or set {KEY_ENV})")
    if state_dir.resolve() in (path.parent.resolve(), *path.parent.resolve().parents):
        raise AuditKeyError(f"{KEY_FILE_ENV}={path}: inside the state dir {state_dir}, beside the state it protects; "
                            "name a file elsewhere")
    try:
        key = _read_key_file(path)
    except OSError as error:
        raise AuditKeyError(f"cannot read or create the audit key {path}: {error.strerror or type(error).__name__} "
                            f"(run gpuctl as the key's owner, or set {KEY_ENV} or {KEY_FILE_ENV})") from None
    if len(key) < MIN_KEY_CHARS:
        raise AuditKeyError(f"{path} must hold at least {MIN_KEY_CHARS} characters (it has {len(key)})")
    return key.encode()


KEY_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _read_key_file(path: Path) -> str:
    folder = path.parent
    if not os.path.lexists(folder):
        folder.mkdir(mode=0o700, parents=True)
    try:
        dir_fd = os.open(folder, KEY_DIR_FLAGS)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise AuditKeyError(f"{folder}: a symlink or a file, not the audit key's folder") from None
        raise
    try:
        info = os.fstat(dir_fd)
        if info.st_uid not in (0, os.geteuid()) or info.st_mode & 0o022:
            raise AuditKeyError(f"{folder}: others could replace the audit key in it (owner uid {info.st_uid}, mode "
                                f"{stat.S_IMODE(info.st_mode):o}); it must be root's or yours, writable by no one else")
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except FileNotFoundError:
            _create_key_file(dir_fd, path.name)
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise AuditKeyError(f"{path} is a symlink: the audit key must be a file of its own") from None
            raise
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            mode = stat.S_IMODE(info.st_mode)
            if not stat.S_ISREG(info.st_mode):
                raise AuditKeyError(f"{path} is not a regular file")
            if info.st_uid != os.geteuid():
                raise AuditKeyError(f"{path} belongs to uid {info.st_uid}, not to the user running gpuctl "
                                    f"({os.geteuid()})")
            if mode & 0o077:
                raise AuditKeyError(f"{path} is readable by group or others (mode {mode:o}): `chmod 600 {path}`, or "
                                    f"set {KEY_ENV}")
            data = handle.read(MAX_KEY_FILE_BYTES + 1)
    finally:
        os.close(dir_fd)
    if len(data) > MAX_KEY_FILE_BYTES:
        raise AuditKeyError(f"{path} holds over {MAX_KEY_FILE_BYTES} bytes, which no audit key file does")
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise AuditKeyError(f"{path} holds bytes that are not ASCII, which no audit key file does") from None


def _create_key_file(dir_fd: int, name: str) -> None:
    # Written whole under a private name, then linked into place: a concurrent gpuctl sees all of it or none.
    draft = f".{name}.{os.getpid()}"
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=dir_fd)
    with os.fdopen(descriptor, "w", encoding="ascii") as handle:
        handle.write(secrets.token_hex(32) + "\n")
    try:
        os.link(draft, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        pass  # another process made it first: use theirs
    finally:
        os.unlink(draft, dir_fd=dir_fd)


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class AuditLog:
    def __init__(self, path: Path, key: bytes, heads: HeadKeeper | None = None) -> None:
        self.path = path
        self._key = key
        self.heads = heads
        path.parent.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"AuditLog({self.path})"  # never the key

    def _mac(self, body: dict[str, Any]) -> str:
        return hmac.new(self._key, _canonical(body), hashlib.sha256).hexdigest()

    def _head_tag(self, head: ChainHead) -> str:
        return hmac.new(self._key, f"head:{head.seq}:{head.mac}".encode(), hashlib.sha256).hexdigest()

    def append(self, *, who: str, what: str, decision: str, rollout: str | None = None, stage: str | None = None,
               plan_digest: str | None = None, gates: dict[str, Any] | None = None,
               detail: dict[str, Any] | None = None, at: datetime | None = None) -> AuditRecord:
        when = at or datetime.now(UTC)
        # An exclusive lock: the receiver threads and a concurrent CLI append to the same chain.
        with open(self.path, "a+b", opener=_no_follow) as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            content = handle.read()
            complete = content[: content.rfind(b"\n") + 1]
            previous = _last_record(complete)
            lines: list[AuditRecord] = []
            if len(complete) < len(content):
                fragment = content[len(complete):]
                with open(self.path.with_name(self.path.name + ".torn"), "ab", opener=_no_follow) as kept:
                    kept.write(fragment + b"\n")
                handle.truncate(len(complete))
                previous = self._record(previous, when, who="gpuctl", what="audit.torn_line", decision="set_aside",
                                        detail={"bytes": len(fragment), "sha256": hashlib.sha256(fragment).hexdigest(),
                                                "kept_in": self.path.name + ".torn"})
                lines.append(previous)
            record = self._record(previous, when, who=who, what=what, decision=decision, rollout=rollout,
                                  stage=stage, plan_digest=plan_digest, gates=gates, detail=detail or {})
            lines.append(record)
            handle.write(b"".join(_canonical(r.__dict__) + b"\n" for r in lines))
            handle.flush()
            os.fsync(handle.fileno())
            if self.heads is not None:
                # Under the log's lock, so the kept head never goes back to an older record.
                head = ChainHead(record.seq, record.mac)
                self.heads.keep_audit_head(head, self._head_tag(head))
        return record

    def _record(self, previous: AuditRecord | None, at: datetime, **fields: Any) -> AuditRecord:
        body: dict[str, Any] = {"seq": previous.seq + 1 if previous else 1, "at": at.isoformat(),
                                "rollout": None, "stage": None, "plan_digest": None, "gates": None, **fields,
                                "prev": previous.mac if previous else GENESIS}
        return AuditRecord(**body, mac=self._mac(body))

    def head(self) -> ChainHead | None:
        """The newest complete record, as the next append chains to it (unverified: `verify` judges)."""
        content = self.path.read_bytes() if self.path.exists() else b""
        last = _last_record(content[: content.rfind(b"\n") + 1])
        return ChainHead(last.seq, last.mac) if last is not None else None

    def records(self) -> Iterator[AuditRecord]:
        """Every complete record as written, authentic or not (`authentic` and `verify` judge them)."""
        for _, line in _lines(self.path):
            record = _parse(line)
            if record is not None:
                yield record

    def authentic(self) -> dict[str, AuditRecord]:
        """The records whose mac the key reproduces, by mac: what the state may trust as audited."""
        found = {}
        for record in self.records():
            body = {k: v for k, v in record.__dict__.items() if k != "mac"}
            if hmac.compare_digest(self._mac(body), record.mac):
                found[record.mac] = record
        return found

    def verify(self, anchors: Iterable[tuple[str, ChainHead]] = ()) -> ChainReport:
        """The chain's report, or AuditChainBrokenError naming the first line that breaks it.

        Checked against the head kept in the state (when there is a keeper) and `anchors` (where, head): the log
        must hold each of them, unchanged."""
        prev, count, macs, torn = GENESIS, 0, dict[int, str](), 0
        for number, line in _lines(self.path):
            if not line.endswith(b"\n"):
                torn = len(line)
                break
            if not line.strip():
                continue
            record = _parse(line)
            if record is None:
                raise AuditChainBrokenError(number, "not a record")
            if record.prev != prev:
                raise AuditChainBrokenError(number, "does not follow the record before it (removed or reordered)")
            if record.seq != count + 1:
                raise AuditChainBrokenError(number, f"sequence {record.seq} where {count + 1} was expected")
            body = {k: v for k, v in record.__dict__.items() if k != "mac"}
            if not hmac.compare_digest(self._mac(body), record.mac):
                raise AuditChainBrokenError(number, "content does not match its mac (edited, or another key)")
            prev, count = record.mac, count + 1
            macs[record.seq] = record.mac
        checked = [*self._kept_head(count), *anchors]
        for where, head in checked:
            if head.seq > count:
                raise AuditChainBrokenError(count + 1, f"the log ends at record {count} but {where} names record "
                                                       f"{head.seq}: records were removed from the end")
            if not hmac.compare_digest(macs.get(head.seq, ""), head.mac):
                raise AuditChainBrokenError(head.seq, f"record {head.seq} is not the one {where} names")
        return ChainReport(count, torn, tuple(w for w, _ in checked))

    def _kept_head(self, count: int) -> list[tuple[str, ChainHead]]:
        kept = self.heads.audit_head() if self.heads is not None else None
        if kept is None:
            return []
        head, tag = kept
        if not hmac.compare_digest(self._head_tag(head), tag):
            raise AuditChainBrokenError(min(head.seq, count + 1), "the head kept in the rollout state does not carry "
                                                                  "the key's tag (written without the key)")
        return [("the head kept in the rollout state", head)]


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    if not path.exists():
        return
    with open(path, "rb", opener=_no_follow) as handle:
        yield from enumerate(handle, start=1)


def _no_follow(path: str, flags: int) -> int:
    """gpuctl may run as root: a log (or its .torn file) swapped for a link is an error (ELOOP), never followed into
    a file elsewhere that the append would truncate or write."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)


def _parse(line: bytes) -> AuditRecord | None:
    try:
        fields = json.loads(line)
        return AuditRecord(**fields) if isinstance(fields, dict) else None
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError):
        return None


def _last_record(complete: bytes) -> AuditRecord | None:
    # The newest line that is a record: a damaged one is for `verify` to report, never a reason to stop appending.
    for line in reversed(complete.splitlines()):
        record = _parse(line)
        if record is not None:
            return record
    return None
