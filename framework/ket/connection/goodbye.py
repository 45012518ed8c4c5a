"""Closing a PostgreSQL connection and waiting until its server process is gone.

Closing only sends the server a goodbye; its process exits a moment later. A budget that
counted the connection closed at once, and opened the next one, would have the server count
one more than the budget meanwhile (`pg_stat_activity` shows the leaving process too). So
every connection the budget counts closes here: it returns once the server has hung up, or
after SERVER_GONE_SECONDS (the connection is closed on this side anyway). Meanwhile the
connection is marked as leaving (`leaving`): the budget counts it as open though it is closed on
this side, and is told when it is gone, so the next connection waits for the server's goodbye.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from typing import Any

import psycopg

from ket.connection import budget
from ket.connection.budget import LEAVING

SERVER_GONE_SECONDS = 1.0


def leaving(raw: Any) -> bool:
    """Whether `raw` was closed here and its server process may not be gone yet."""
    return bool(getattr(raw, LEAVING, False))


def _mark(raw: Any, value: bool) -> None:
    with contextlib.suppress(AttributeError):
        setattr(raw, LEAVING, value)


def mark_leaving(raw: Any) -> None:
    """`raw` is about to be closed elsewhere (an engine's pool): it counts until `gone(raw)`."""
    _mark(raw, True)


async def close_quietly(raw: psycopg.AsyncConnection[Any]) -> None:
    """Close `raw`; return once its server process is gone (within SERVER_GONE_SECONDS),
    counted by the budget until then."""
    peer = peer_of(raw)
    _mark(raw, peer is not None)
    try:
        with contextlib.suppress(Exception):  # a broken connection is gone either way
            await raw.close()
        await server_gone(peer)
    finally:
        gone(raw)


def gone(raw: Any) -> None:
    """`raw`'s server process is gone (or was waited for long enough): the budget counts it no
    more, and its waiters may take the room."""
    if not leaving(raw):
        return
    _mark(raw, False)
    for spent in budget.every():
        spent.released()


async def server_gone(peer: socket.socket | None) -> None:
    """Return once the server behind `peer` (from `peer_of`, taken before the close) has hung
    up, or after SERVER_GONE_SECONDS; closes `peer`."""
    if peer is None:
        return
    try:
        loop = asyncio.get_running_loop()
        # not asyncio.wait_for, which in Python 3.11 drops a cancel that meets its result
        async with asyncio.timeout(SERVER_GONE_SECONDS):
            while await loop.sock_recv(peer, 4096):
                pass  # whatever the server still sends, until it hangs up
    except (OSError, TimeoutError):
        pass
    finally:
        peer.close()


def close_quietly_sync(raw: psycopg.Connection[Any]) -> None:
    """`close_quietly` for a connection of the synchronous driver (a call made in a thread)."""
    peer = peer_of(raw)
    with contextlib.suppress(Exception):
        raw.close()
    if peer is None:
        return
    try:
        peer.setblocking(True)
        peer.settimeout(SERVER_GONE_SECONDS)
        while peer.recv(4096):
            pass
    except OSError:  # socket.timeout included
        pass
    finally:
        peer.close()


def peer_of(raw: psycopg.AsyncConnection[Any] | psycopg.Connection[Any]) -> socket.socket | None:
    """A second handle on the connection's socket, to hear the server hang up; the connection
    counts as leaving from then until `gone(raw)` (close_quietly calls both)."""
    try:
        if raw.closed:
            return None
        peer = socket.socket(fileno=os.dup(raw.pgconn.socket))
        peer.setblocking(False)
        return peer
    except (OSError, psycopg.Error):
        return None
