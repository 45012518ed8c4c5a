"""The embedded databases' files: private to their owner, whatever the umask.

SQLite would create a database file with the process's umask (often 0644: readable by every
user of the machine) and its `-wal` and `-shm` side files with the database file's mode. So ket
creates the file itself, 0600, before SQLite opens it, in folders it creates 0700. Its own folder,
`.ket/`, is kept 0700 even if something else made it first; files ket did not create, and folders
the operator chose, are left as they are. SQLite gives the side files its database file's mode.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ket.connection.database_url import parse_database_url, shown_url
from ket.errors import StoreError
from ket.folder import FOLDER_MODE, make_folders
from ket.store.failure import describe

if TYPE_CHECKING:
    from ket.connection.url import UrlLike

KET_FOLDER = ".ket"
FILE_MODE = 0o600


def sqlite_path(url: UrlLike) -> Path | None:
    """The file of a SQLite URL; None for other databases, memory and `file:` URIs."""
    parsed = parse_database_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    if database in ("", ":memory:") or "uri" in parsed.query or database.startswith("file:"):
        return None
    return Path(database)


def ensure_sqlite_folder(url: UrlLike) -> None:
    """Create the folder of a SQLite database (e.g. `.ket/`), 0700, if it is missing."""
    path = sqlite_path(url)
    if path is None:
        return
    try:
        make_folders(path.parent)
    except OSError as error:
        raise StoreError(
            f"cannot create the folder of {shown_url(url)!r}: {describe(error)}"
        ) from error
    ket = path.parent
    if ket.name == KET_FOLDER and not ket.is_symlink():
        with contextlib.suppress(OSError):  # best effort on a folder someone else made
            os.chmod(ket, FOLDER_MODE)


def sqlite_file_missing(url: UrlLike) -> bool:
    """Whether `url` is a SQLite file that does not exist (opening it would create it empty)."""
    path = sqlite_path(url)
    return path is not None and not path.exists()


def require_database(url: UrlLike) -> None:
    """StoreError when `url` is a SQLite file that does not exist: only `ket migrate` (and the
    commands that migrate or run the jobs) make one; one that merely reads or enqueues would
    leave an empty file behind, and then fail on the missing tables anyway."""
    if sqlite_file_missing(url):
        from ket.connection.address import sqlite_synchronous

        sqlite_synchronous(url)  # a bad ?synchronous= is the clearer error: it names the value
        raise StoreError(
            f"database {shown_url(url)!r} does not exist: it has no ket tables yet; "
            "run `ket migrate`"
        )


def ensure_sqlite_file(url: UrlLike) -> None:
    """Create a SQLite database's file 0600 when its folder exists and the file does not."""
    path = sqlite_path(url)
    if path is None or not path.parent.is_dir():
        return  # SQLite reports a missing folder in its own words
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except OSError:  # it exists, or SQLite will say in its own words why it cannot
        return
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
