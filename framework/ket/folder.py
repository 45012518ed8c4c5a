"""Private folders: files 0600 in folders 0700 whatever the umask, links never followed.

Blobs (`ctx.storage`) and the dev sender's outbox are files under a root folder that an operator
chooses; below it, each tenant has a folder of its own. A symbolic link planted below the root
(by a careless script, or by anyone who can write there) must not lead a read or a write out of
the tenant's folder: into another tenant's, or anywhere else. So every step below the root is
opened by file descriptor, relative to the step before, with `O_NOFOLLOW`: a link is refused
wherever it stands, and swapping a folder for a link between a check and its use changes
nothing, because no path is looked up twice. The root itself is the operator's: links in it are
followed.

Writes go to a temporary file in the target's folder, created 0600 and renamed over the target,
so a reader sees the old file or the new one, and a failed write leaves no file behind.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

# Temporary files of unfinished writes; listings skip them.
TEMP_PREFIX = ".ket-tmp-"
FOLDER_MODE = 0o700
FILE_MODE = 0o600
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted where a file should be must not hang the read.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

Kind = Literal["file", "folder", "link", "other"]


class Refused(Exception):
    """A step of a path is not what the path needs: `parts[:depth + 1]` is a `kind`."""

    def __init__(self, depth: int, kind: Kind) -> None:
        self.depth = depth
        self.kind = kind
        super().__init__(f"step {depth} of the path is a {kind}")


@contextlib.contextmanager
def opened(root: Path, parts: Sequence[str], *, create: bool) -> Iterator[int | None]:
    """A descriptor of the folder `root/parts[0]/...`, each part opened without following a
    link (Refused, naming the part); None if a part is missing and `create` is false. Folders
    it creates are 0700."""
    if create:
        make_folders(root)
    try:
        fd: int | None = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield None
        return
    try:
        for depth, name in enumerate(parts):
            assert fd is not None
            child = _child(fd, name, depth, create=create)
            os.close(fd)
            fd = child
            if fd is None:
                break
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def kind_of(folder: int, name: str) -> Kind | None:
    """What `name` is in `folder`, links not followed; None when there is nothing."""
    try:
        mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "folder"
    return "file" if stat.S_ISREG(mode) else "other"


def read(folder: int, name: str, depth: int) -> bytes | None:
    """The content of the regular file `name`, or None when there is none (or a folder)."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError:
        kind = kind_of(folder, name)
        if kind in ("link", "other"):
            raise Refused(depth, kind) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            return None
        if not stat.S_ISREG(mode):
            raise Refused(depth, "other")
        with open(fd, "rb", closefd=False) as file:
            return file.read()
    finally:
        os.close(fd)


def write(folder: int, name: str, data: bytes, depth: int) -> None:
    """Replace `name` with a 0600 file holding `data`, atomically (Refused over a link or a
    folder). A link planted after the check is replaced, never written through."""
    kind = kind_of(folder, name)
    if kind in ("link", "folder"):
        raise Refused(depth, kind)
    temp = TEMP_PREFIX + secrets.token_hex(8)
    fd = os.open(temp, _CREATE_FLAGS, FILE_MODE, dir_fd=folder)
    try:
        with open(fd, "wb") as file:
            os.fchmod(file.fileno(), FILE_MODE)  # the umask may have taken bits off
            file.write(data)
            file.flush()
            os.fsync(file.fileno())  # the rename must not land before the data does
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=folder)
        raise


def remove(folder: int, name: str, depth: int) -> bool:
    """Delete the regular file `name`; False if there is none (a folder is none either)."""
    kind = kind_of(folder, name)
    if kind == "link":
        raise Refused(depth, kind)
    if kind != "file":
        return False
    try:
        os.unlink(name, dir_fd=folder)
    except FileNotFoundError:
        return False
    return True


def files(folder: int) -> list[str]:
    """The relative POSIX paths of the regular files below `folder`; links and temporary files
    are skipped, never followed."""
    found: list[str] = []
    _walk(folder, "", found)
    return found


def _walk(folder: int, prefix: str, found: list[str]) -> None:
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                try:
                    child = os.open(entry.name, _FOLDER_FLAGS, dir_fd=folder)
                except OSError:  # swapped for a link or removed since: not ours to follow
                    continue
                try:
                    _walk(child, f"{prefix}{entry.name}/", found)
                finally:
                    os.close(child)
            elif entry.is_file(follow_symlinks=False) and not entry.name.startswith(TEMP_PREFIX):
                found.append(prefix + entry.name)


def _child(folder: int, name: str, depth: int, *, create: bool) -> int | None:
    try:
        return os.open(name, _FOLDER_FLAGS, dir_fd=folder)
    except FileNotFoundError:
        if not create:
            return None
    except OSError:
        _refuse_unless_folder(folder, name, depth)
        raise  # a folder it cannot open: permissions
    try:
        os.mkdir(name, FOLDER_MODE, dir_fd=folder)
        made = True
    except FileExistsError:  # made meanwhile, by a concurrent write
        made = False
    try:
        child = os.open(name, _FOLDER_FLAGS, dir_fd=folder)
    except OSError:
        _refuse_unless_folder(folder, name, depth)
        raise
    if made:
        os.fchmod(child, FOLDER_MODE)  # the umask may have taken bits off
    return child


def _refuse_unless_folder(folder: int, name: str, depth: int) -> None:
    kind = kind_of(folder, name)
    if kind is not None and kind != "folder":
        raise Refused(depth, kind) from None


def make_folders(root: Path) -> None:
    """Create the missing folders of `root`, each 0700 whatever the umask (existing ones are
    left as they are); OSError when one cannot be made."""
    missing = []
    path = root
    while not path.is_dir() and path != path.parent:
        missing.append(path)
        path = path.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, FOLDER_MODE)
        except FileExistsError:
            continue
        os.chmod(path, FOLDER_MODE)
