"""Wake-ups between processes on one SQLite file: a datagram to each process that waits.

A process waiting for jobs on `.ket/acme.db` binds a Unix datagram socket in the folder beside
it, `.ket/acme.db.wake/<pid>-<random>.sock`; a commit that makes work runnable at once sends
every socket there one datagram naming the queues, and the waiting process wakes its waiters on
them. PostgreSQL's NOTIFY does this for the other dialect.

Wake-ups are hints: polling stays the guarantee. So every send is non-blocking and its errors are
ignored (a full buffer, a socket gone), a socket nobody is bound to any more (its process died)
is removed by the next sender, and a folder that cannot be made or used leaves polling alone.

A datagram socket rather than a FIFO per process: a send is one `sendto` (a FIFO needs open,
write and close, and may raise SIGPIPE), a message stays whole, and "connection refused" proves
that nobody is bound, since `bind` creates the file and binds it in one step (a FIFO exists
before its reader opens it, so a sender could take a new one for stale). Both deliver in about
10 us here.

The folder is private: made 0700 by the first waiting process, sockets 0600, and used only when
it is a real folder (not a link) owned by this user and writable by it alone; a link in its place
is refused, and nothing is bound or sent through it. It is opened without following a link once
per use, and on Linux its sockets are addressed through that descriptor
(`/proc/self/fd/<fd>/<name>`): no path is looked up twice, and a deep folder does not meet the
108-byte limit of socket addresses. Entries that are links are skipped.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import logging
import os
import secrets
import socket
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ket import process
from ket.connection.database_file import sqlite_path
from ket.wakeup.local import Wakeups, shared

if TYPE_CHECKING:
    from ket.connection.url import UrlLike

logger = logging.getLogger(__name__)

SUFFIX = ".wake"
FOLDER_MODE = 0o700
SOCKET_MODE = 0o600
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# a list of queue names this long or longer is sent as an empty datagram: "every queue"
_MAX_NAMES_BYTES = 8_192
_READS_PER_WAKE = 256  # datagrams read per readiness callback, so a flood cannot hold the loop
_PROC_FD = "/proc/self/fd"
_BY_DESCRIPTOR = os.path.isdir(_PROC_FD)


class Refused(OSError):
    """The wake folder is not a private folder of this user: wake-ups between processes are off."""


class WakeFolder:
    """The wake folder of one SQLite file: `ring` tells the processes waiting on it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def of(cls, url: UrlLike) -> WakeFolder | None:
        """The folder beside a SQLite URL's file (its real path, so every process agrees on it);
        None for other databases and `file:` URIs."""
        database = sqlite_path(url)
        if database is None:
            return None
        real = Path(os.path.realpath(database))
        return cls(real.with_name(real.name + SUFFIX))

    def ring(self, queues: Iterable[str], *, besides: Wakeups | None = None) -> None:
        """Send each waiting process one datagram naming `queues` (none: nothing is sent);
        `besides` skips this process's sockets that feed those Wakeups (woken already)."""
        names = sorted(set(queues))
        if not names:
            return
        message = "\n".join(names).encode()
        if len(message) >= _MAX_NAMES_BYTES:
            message = b""
        try:
            with self.opened(create=False) as folder:
                if folder is not None:
                    _send_all(folder, self.path, message, _sockets().feeding(besides))
        except OSError:
            return  # missing, not ours, unreadable: the waiting processes poll

    @contextlib.contextmanager
    def opened(self, *, create: bool) -> Iterator[int | None]:
        """A descriptor of the folder, opened without following a link (Refused when it is
        not a private folder of this user); None when it is missing and `create` is false."""
        parent = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        made = False
        try:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(self.path.name, FOLDER_MODE, dir_fd=parent)
                    made = True
            folder = os.open(self.path.name, _FOLDER_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if create:
                raise
            folder = None
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Refused(error.errno, "a link or not a folder") from None
            raise
        finally:
            os.close(parent)
        if folder is None:
            yield None
            return
        try:
            if made:
                os.fchmod(folder, FOLDER_MODE)  # the umask may have taken bits off
            info = os.fstat(folder)
            if info.st_uid != os.geteuid() or info.st_mode & 0o022:
                raise Refused(errno.EPERM, "not this user's own, or others may write to it")
            yield folder
        finally:
            os.close(folder)


class FolderWakeups(Wakeups):
    """The Wakeups of one SQLite file: `notify` also rings the other processes waiting on it."""

    def __init__(self, folder: WakeFolder) -> None:
        super().__init__()
        self.folder = folder

    def notify(self, queues: Iterable[str]) -> None:
        """Wake this process's waiters on `queues`, and every other process's."""
        names = set(queues)
        if names:
            super().notify(names)
            self.folder.ring(names, besides=self)

    def heard(self, queues: Iterable[str]) -> None:
        """Another process rang: wake this process's waiters only (never ring back)."""
        super().notify(queues)


def shared_wakeups(key: str, url: UrlLike) -> Wakeups:
    """The process-wide Wakeups of a SQLite file: a FolderWakeups when it has a wake folder."""
    folder = WakeFolder.of(url)
    if folder is None:
        return shared(key)
    return shared(key, lambda: FolderWakeups(folder))


class Inbox:
    """This process's socket in a wake folder, read on one event loop into a FolderWakeups."""

    def __init__(self, wakeups: FolderWakeups) -> None:
        self.wakeups = wakeups
        self.loop = asyncio.get_running_loop()
        self.name = f"{os.getpid()}-{secrets.token_hex(8)}.sock"
        self._socket: socket.socket | None = None
        self._folder: int | None = None
        try:
            self._bind()
        except OSError as error:
            self._close()
            _warn_once(wakeups.folder, error)

    def _bind(self) -> None:
        path = self.wakeups.folder.path
        with self.wakeups.folder.opened(create=True) as folder:
            assert folder is not None  # created when missing
            self._folder = os.dup(folder)
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.setblocking(False)
        self._socket.bind(_address(self._folder, path, self.name))
        # unreachable by others in a 0700 folder anyway; kept private should it be widened
        os.chmod(self.name, SOCKET_MODE, dir_fd=self._folder)
        _sockets().own(self.name, self.wakeups)
        self.loop.add_reader(self._socket.fileno(), self._read)

    def _read(self) -> None:
        if self._socket is None:
            return
        queues: set[str] = set()
        every = False
        for _ in range(_READS_PER_WAKE):
            try:
                data = self._socket.recv(_MAX_NAMES_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                return
            if data:
                queues.update(data.decode(errors="replace").split("\n"))
            else:
                every = True
        if every:
            self.wakeups.notify_all()
        else:
            self.wakeups.heard(queues)

    def close(self) -> None:
        """Stop reading and remove the socket's file (on the inbox's loop if it still runs)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop or not self.loop.is_running():
            self._close()
        else:
            self.loop.call_soon_threadsafe(self._close)

    def _close(self) -> None:
        sock, self._socket = self._socket, None
        if sock is not None:
            if not self.loop.is_closed():
                self.loop.remove_reader(sock.fileno())
            sock.close()
        _sockets().disown(self.name)
        folder, self._folder = self._folder, None
        if folder is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.name, dir_fd=folder)
            os.close(folder)


# -- the process's part: its inboxes, its bound sockets, its sending socket ----------------------


class Sockets:
    """This process's wake sockets (a part of the process: ket.process): one inbox per database
    and event loop, shared by that loop's stores; the names of its bound sockets with the
    Wakeups each feeds (a ring skips those woken already); one unbound socket that sends for the
    whole process; the folders it warned of."""

    def __init__(self) -> None:
        self.inboxes: dict[tuple[int, asyncio.AbstractEventLoop], tuple[Inbox, int]] = {}
        self.inboxes_lock = threading.Lock()
        self._own: dict[str, Wakeups] = {}
        self._own_lock = threading.Lock()
        self._sender: socket.socket | None = None
        self._sender_lock = threading.Lock()
        self.warned: set[Path] = set()

    def own(self, name: str, wakeups: Wakeups) -> None:
        with self._own_lock:
            self._own[name] = wakeups

    def disown(self, name: str) -> None:
        with self._own_lock:
            self._own.pop(name, None)

    def feeding(self, wakeups: Wakeups | None) -> frozenset[str]:
        """The names of this process's sockets that feed `wakeups`."""
        if wakeups is None:
            return frozenset()
        with self._own_lock:
            return frozenset(name for name, fed in self._own.items() if fed is wakeups)

    def sender(self) -> socket.socket:
        """One unbound datagram socket sends for the whole process."""
        with self._sender_lock:
            if self._sender is None:
                self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sender.setblocking(False)
                atexit.register(self._sender.close)  # closed, not left to the garbage collector
            return self._sender


def _sockets() -> Sockets:
    return process.current().part(Sockets)


def acquire(wakeups: FolderWakeups) -> Inbox:
    """The process's inbox for `wakeups` on the running loop (one more user of it)."""
    key = (id(wakeups), asyncio.get_running_loop())
    sockets = _sockets()
    with sockets.inboxes_lock:
        inbox, users = sockets.inboxes.get(key, (None, 0))
        if inbox is None:
            inbox = Inbox(wakeups)
        sockets.inboxes[key] = (inbox, users + 1)
        return inbox


def release(inbox: Inbox) -> None:
    """One user fewer; the last one closes the inbox."""
    key = (id(inbox.wakeups), inbox.loop)
    sockets = _sockets()
    with sockets.inboxes_lock:
        current, users = sockets.inboxes.get(key, (None, 0))
        if current is inbox and users > 1:
            sockets.inboxes[key] = (inbox, users - 1)
            return
        if current is inbox:
            del sockets.inboxes[key]
    inbox.close()


def listening(wakeups: FolderWakeups, held: Inbox | None) -> Inbox:
    """The inbox of a store about to wait on the running loop: `held` if it is on this loop."""
    if held is not None:
        if held.loop is asyncio.get_running_loop():
            return held
        release(held)
    return acquire(wakeups)


# -- sending ------------------------------------------------------------------------------------


def _send_all(folder: int, path: Path, message: bytes, skipped: frozenset[str]) -> None:
    with os.scandir(folder) as entries:
        names = [
            entry.name
            for entry in entries
            if entry.name.endswith(".sock") and entry.name not in skipped and not entry.is_symlink()
        ]
    sender = _sockets().sender()
    for name in names:
        try:
            sender.sendto(message, _address(folder, path, name))
        except ConnectionRefusedError:  # nobody is bound to it: its process is gone
            _remove_stale(folder, name)
        except OSError:  # a full buffer (that process has wake-ups to read), a race, a limit
            continue


def _remove_stale(folder: int, name: str) -> None:
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
            os.unlink(name, dir_fd=folder)


def _address(folder: int, path: Path, name: str) -> str:
    if _BY_DESCRIPTOR:
        return f"{_PROC_FD}/{folder}/{name}"
    # elsewhere by path, checked once more to be the folder opened: a narrow race remains, open
    # only to whoever may write the folder's parent
    if not os.path.samestat(os.stat(path, follow_symlinks=False), os.fstat(folder)):
        raise Refused(errno.EPERM, "replaced while in use")
    return str(path / name)


def _warn_once(folder: WakeFolder, error: OSError) -> None:
    warned = _sockets().warned
    if folder.path in warned:
        return
    warned.add(folder.path)
    logger.warning(
        "wake-ups from other processes are off for %s (%s); jobs they enqueue are found by "
        "polling, within poll_max_ms",
        folder.path,
        error.strerror or error,
    )
