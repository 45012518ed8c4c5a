"""Every error ket raises, under one base.

    KetError
    ├── DeclarationError      a define_* call was given something it cannot represent
    │   ├── InputSpecError    an input shorthand or class that cannot become a pydantic model
    │   └── EffectSyntaxError an effect string outside the effect grammar
    ├── ScheduleError         a schedule that does not parse or cannot fire
    ├── CheckFailed           `ket check` found errors; carries the findings
    ├── WorkspaceError        the workspace or deployment cannot be loaded
    ├── ManifestError         a manifest file that is not YAML, not a mapping, or of unknown format
    ├── StoreError            the job store failed
    │   ├── StoreUnavailable  the database cannot be reached now (refused, lost, shutting down)
    │   │   └── NoRoom        the server has no room for another connection (max_connections)
    │   ├── JobRejected       a job or a store call was refused before anything was written
    │   │   └── ConnectionRejected  `connection=` given something ket cannot write on, or a
    │   │                           connection on another database than the tenant's (a TypeError)
    │   └── RecordRejected    a record value its field cannot hold; nothing written (a ValueError)
    ├── EffectError           an operation the running function or job did not declare
    ├── SecretKeyError        KET_SECRET_KEYS is malformed, or opens no sealed secret of a job
    ├── StorageKeyError       a storage key that is unsafe or crosses a link (also a ValueError)
    ├── BlobRejected          a blob over the storage size cap; nothing written (also a ValueError)
    ├── ResultRejected        a handler returned what is not its job's output (also a ValueError)
    ├── StorageError          the blob storage is misconfigured (KET_STORAGE_URL) or failed
    └── TransportError        the outbound transport is misconfigured (e.g. an unknown URL)
        └── MessageRejected   a message refused before anything was sent (also a ValueError)

    Retry, Discard, Aborted   control flow a handler raises (or sees) to steer its job's outcome

Each class's docstring is its default message. Errors for a user's own mistakes name the offending
value and, where there is one, the file and line of the declaration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from ket.check.message import CheckMessage


class KetError(Exception):
    """ket failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class DeclarationError(KetError):
    """A declaration is malformed."""


class InputSpecError(DeclarationError):
    """An input declaration cannot be turned into a validated model."""


class EffectSyntaxError(DeclarationError):
    """An effect does not follow the effect grammar."""


ScheduleProblem = Literal[
    "syntax", "too_frequent", "bad_time", "unknown_timezone", "no_timezone", "never_fires"
]


class ScheduleError(KetError):
    """A schedule does not parse."""

    def __init__(self, message: str, *, problem: ScheduleProblem = "syntax") -> None:
        self.problem: ScheduleProblem = problem
        super().__init__(message)


class WorkspaceError(KetError):
    """The workspace cannot be loaded."""


class ManifestError(KetError):
    """The manifest cannot be read."""


class StoreError(KetError):
    """The job store failed."""


class StoreUnavailable(StoreError):
    """The database cannot be reached now: the connection was refused or lost, or the server
    is shutting down or starting. Worth trying again later."""


class NotMigrated(StoreError):
    """The database lacks ket's tables, or a column or table of a later migration than it has:
    it is older than this version of ket. An operator runs `ket migrate`; trying again does not
    help until then."""


class NoRoom(StoreUnavailable):
    """The database server refused a connection for want of room: its `max_connections` are
    taken (by ket's processes or by other clients). Nothing is wrong with ket or the database;
    worth trying again once connections are let go. Logged as a warning, not an error."""


class JobRejected(StoreError):
    """The job was refused; nothing was written."""


class ConnectionRejected(JobRejected, TypeError):
    """`connection=` is no connection ket can enqueue on, or not the tenant's; nothing written."""


class RecordRejected(StoreError, ValueError):
    """A record's value was refused: its field cannot hold it; nothing was written.

    `model`, `field` and `problem` say which value and why, without quoting it (the message
    does quote it, for the log)."""

    def __init__(self, model: str, field: str, problem: str, value: object) -> None:
        super().__init__(f"{model}.{field}: {problem}, got {value!r}")
        self.model = model
        self.field = field
        self.problem = problem


class CheckFailed(KetError):
    """The declarations have errors; run `ket check` for the list."""

    def __init__(self, messages: Sequence[CheckMessage]) -> None:
        self.messages = tuple(messages)
        lines = [m.render() for m in self.messages]
        super().__init__("the declarations have errors:\n" + "\n".join(lines))


class EffectError(KetError):
    """The operation was not declared in the effects of the running function or job."""


class SecretKeyError(KetError):
    """The secret keys (KET_SECRET_KEYS) are malformed or cannot open a sealed secret."""


class PayloadVersionError(KetError):
    """A stored payload's input version cannot be brought to the job's: no upgrade reaches it
    from an older version (`newer` False), or it was written by a newer deployment (True)."""

    def __init__(self, message: str, *, newer: bool) -> None:
        super().__init__(message)
        self.newer = newer


class StorageKeyError(KetError, ValueError):
    """The storage key is not a safe relative path, or a symbolic link stands on its path."""


class ResultRejected(KetError, ValueError):
    """The value the handler returned is not the job's declared output."""


class BlobRejected(KetError, ValueError):
    """The blob is larger than the storage size cap; nothing was written."""


class StorageError(KetError):
    """The blob storage is misconfigured (KET_STORAGE_URL) or did not answer as it should."""


class TransportError(KetError):
    """The outbound transport is misconfigured."""


class MessageRejected(TransportError, ValueError):
    """The message was refused; nothing was sent."""


class Retry(Exception):
    """Retry this job later: raise Retry(in_seconds=...) from a handler."""

    def __init__(self, in_seconds: float, reason: str | None = None) -> None:
        if in_seconds < 0:
            raise ValueError(f"Retry in_seconds must not be negative, got {in_seconds!r}")
        self.in_seconds = in_seconds
        self.reason = reason
        super().__init__(reason or f"retry in {in_seconds} seconds")


class Snooze(Exception):
    """Put this job off without spending an attempt: raise or return Snooze(seconds) from a
    handler. It runs again after `seconds` with the same attempt number; the history records
    the snooze."""

    def __init__(self, seconds: float, reason: str | None = None) -> None:
        if seconds < 0:
            raise ValueError(f"Snooze seconds must not be negative, got {seconds!r}")
        self.seconds = seconds
        self.reason = reason
        super().__init__(reason or f"snooze for {seconds} seconds")


class Discard(Exception):
    """Discard this job now, without further attempts: raise Discard(reason) from a handler."""

    def __init__(self, reason: str = "discarded by the handler") -> None:
        self.reason = reason
        super().__init__(reason)


class Aborted(Exception):
    """The job's signal was aborted (timeout, shutdown or cancelled)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"aborted: {reason}")
