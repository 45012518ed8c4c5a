"""The sent ledger of a memory database: which outbound messages were claimed or sent, by key."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal


@dataclass(kw_only=True)
class _Entry:
    state: Literal["claimed", "sent"]
    claimed_at: datetime
    sent_at: datetime | None = None


class SentMessages:
    """One key per message: claimed (a send in flight, or one that crashed) or sent.

    The same rules as the SQL store's `ket_sent_messages`; callers hold the database's lock.
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def claim(self, key: str, now: datetime, stale_after_seconds: float) -> bool:
        """Claim a new key, or take over a claim older than `stale_after_seconds`."""
        entry = self._entries.get(key)
        if entry is not None and not _stale(entry, now, stale_after_seconds):
            return False
        self._entries[key] = _Entry(state="claimed", claimed_at=now)
        return True

    def confirm(self, key: str, now: datetime) -> None:
        """Record the message as sent, claimed or not: a message that went out stays recorded."""
        entry = self._entries.setdefault(key, _Entry(state="sent", claimed_at=now))
        entry.state = "sent"
        entry.sent_at = now

    def was_sent(self, key: str) -> bool:
        """Whether the key was confirmed sent."""
        entry = self._entries.get(key)
        return entry is not None and entry.state == "sent"

    def release(self, key: str) -> None:
        """Forget a claim that did not end in a send; a sent message is never forgotten."""
        entry = self._entries.get(key)
        if entry is not None and entry.state == "claimed":
            del self._entries[key]


def _stale(entry: _Entry, now: datetime, stale_after_seconds: float) -> bool:
    """A claim (never a sent message) older than the staleness: its sender is presumed gone."""
    return entry.state == "claimed" and entry.claimed_at < now - timedelta(
        seconds=stale_after_seconds
    )
