"""The `--out` folder of `gpuctl plan`, written through descriptors: no link inside it is ever followed.

`gpuctl plan` runs as root on hosts where a user may have touched an earlier plan's folder, and a symlink planted in
it made the next plan delete a file outside the folder and write its files there (issue 41). So the folder is opened
once, without following a link, and every name below it is resolved one component at a time through directory
descriptors opened with O_NOFOLLOW: a link or a non-folder where a plan keeps a folder is refused with an error
naming it, before anything is removed. Files are created new (O_EXCL), so a name that appeared after the earlier
plan's files were removed is refused too, never written through. The path given to --out is taken as the operator
wrote it up to its last component, which must be a folder, not a link.

The folder's manifest (OUT_MANIFEST) lists every file the last plan wrote; the next plan removes exactly those, and
refuses a folder holding anything without one.
"""

import errno
import os
import stat
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Self

OUT_MANIFEST = ".gpuctl-plan"
"""In an --out folder: every file the last plan wrote, one relative path per line; the next plan removes those."""
MAX_MANIFEST_BYTES = 4 << 20
"""4 MiB: prod's plan lists about 700 files in 60 kB; a manifest past this was not written by a plan."""

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO put in the manifest's place must not hang the open; fstat then refuses it.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
NOT_A_FOLDER_ERRNOS = frozenset({errno.ELOOP, errno.ENOTDIR})
"""What opening a name as a folder without following it raises when it is a link or a file."""


class OutDirError(Exception):
    """--out names a folder a plan may not write: it holds files no plan wrote, or a link or file where a plan keeps
    a folder, or a name appeared in it while the plan wrote."""


class PlanFolder:
    """An --out folder held open by descriptor, its earlier plan's files removed, ready for this plan's."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._dirs = {"": fd}
        """Every folder opened so far, by its path inside the plan folder ("" for the folder itself)."""

    @classmethod
    def claim(cls, path: Path) -> Self:
        """Open --out (made if missing) and remove the earlier plan's files, only those its manifest lists."""
        if not os.path.lexists(path):
            path.mkdir(parents=True)
        try:
            fd = os.open(path, DIR_FLAGS)
        except OSError as error:
            if error.errno in NOT_A_FOLDER_ERRNOS:
                raise OutDirError(f"--out {path}: not a folder (a symlink or a file)") from None
            raise
        folder = cls(path, fd)
        try:
            folder._remove_earlier_plan()
        except BaseException:
            folder.close()
            raise
        return folder

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()

    def write(self, relative: str, text: str) -> Path:
        """Create the file `relative` (its folders as needed) holding `text`; its path."""
        parent, name = self._folder(PurePosixPath(relative).parent, create=True), PurePosixPath(relative).name
        try:
            fd = os.open(name, NEW_FILE_FLAGS, 0o666, dir_fd=parent)
        except FileExistsError:
            raise OutDirError(
                f"--out {self.path}: {relative} appeared while the plan was written (the earlier plan's "
                "files were removed); left as it is"
            ) from None
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return self.path / relative

    def record(self, files: Iterable[Path]) -> None:
        """The manifest of this plan's files, for the next plan to remove."""
        # Sorted: the charts render in parallel and finish in any order, and the manifest is a plan file like the rest.
        relative = sorted(path.relative_to(self.path).as_posix() for path in files)
        self.write(OUT_MANIFEST, "".join(f"{path}\n" for path in relative))

    def _folder(self, relative: PurePosixPath, create: bool) -> int:
        """The folder `relative` opened without following a link, each component in turn; made if `create`."""
        key = relative.as_posix() if relative != PurePosixPath() else ""
        if key in self._dirs:
            return self._dirs[key]
        parent = self._folder(relative.parent, create)
        if create:
            with suppress(FileExistsError):
                os.mkdir(relative.name, 0o777, dir_fd=parent)
        try:
            fd = os.open(relative.name, DIR_FLAGS, dir_fd=parent)
        except OSError as error:
            if error.errno in NOT_A_FOLDER_ERRNOS:
                raise OutDirError(
                    f"--out {self.path}: {key} is a symlink or a file where a plan keeps a folder; "
                    "nothing was removed or written through it"
                ) from None
            raise
        self._dirs[key] = fd
        return fd

    def _manifest(self) -> list[PurePosixPath] | None:
        try:
            fd = os.open(OUT_MANIFEST, FILE_FLAGS, dir_fd=self._dirs[""])
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise OutDirError(f"--out {self.path}: {OUT_MANIFEST} is a symlink") from None
            raise
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OutDirError(f"--out {self.path}: {OUT_MANIFEST} is not a file")
            data = handle.read(MAX_MANIFEST_BYTES + 1)
        if len(data) > MAX_MANIFEST_BYTES:
            raise OutDirError(
                f"--out {self.path}: {OUT_MANIFEST} is over {MAX_MANIFEST_BYTES} bytes, which no plan writes"
            )
        listed = []
        for line in data.decode("utf-8", errors="replace").splitlines():
            path = PurePosixPath(line)
            if not line or path.is_absolute() or not {"..", "."}.isdisjoint(line.split("/")) or str(path) != line:
                raise OutDirError(f"--out {self.path}: {OUT_MANIFEST} lists {line!r}, which is no file of a plan")
            listed.append(path)
        return listed

    def _remove_earlier_plan(self) -> None:
        listed = self._manifest()
        if listed is None:
            if os.listdir(self._dirs[""]):
                raise OutDirError(
                    f"--out {self.path}: holds files no plan wrote (no {OUT_MANIFEST}); give a new or empty folder"
                )
            return
        # Every listed file's folders are opened (and judged) before the first file goes: a link refused leaves the
        # earlier plan whole.
        present = []
        for path in listed:
            try:
                parent = self._folder(path.parent, create=False)
            except FileNotFoundError:
                continue
            with suppress(FileNotFoundError):
                if stat.S_ISDIR(os.stat(path.name, dir_fd=parent, follow_symlinks=False).st_mode):
                    raise OutDirError(f"--out {self.path}: {path} is a folder where the earlier plan wrote a file")
                present.append((parent, path.name))
        for parent, name in present:
            with suppress(FileNotFoundError):
                os.unlink(name, dir_fd=parent)  # a link the user put in a file's place goes, never followed
        os.unlink(OUT_MANIFEST, dir_fd=self._dirs[""])
        # The folders the earlier plan's files left empty go too, deepest first; never through a link (rmdir of
        # a name swapped for one fails), and one the user filled stays.
        for key in sorted((k for k in self._dirs if k), key=lambda k: -k.count("/")):
            fd = self._dirs.pop(key)
            try:
                if not os.listdir(fd):
                    head, _, name = key.rpartition("/")
                    with suppress(OSError):
                        os.rmdir(name, dir_fd=self._dirs[head])  # deepest first: its parent is still open
            finally:
                os.close(fd)
