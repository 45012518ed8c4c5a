"""The dashboard's sign-in sessions: what its cookie holds, instead of the token.

Signing in asks the deployment's authenticator about the token once; the principal it answers is
kept as a session in the tenant's store (SessionStore), and the cookie holds only the session's
name: `v1.<tenant>.<expires>.<secret>.<mac>`, an HMAC under the dashboard's key
(`KET_DASHBOARD_KEY`, as the CSRF tokens) over the tenant, the expiry and a random secret.

    value = await sessions.open(store, "acme", principal)     # at sign-in: the cookie's value
    secret = sessions.secret_of("acme", value)                # each request: its MAC, no database
    found = await sessions.find(store, secret)                # then the session, or None
    await sessions.close(store, found.key)                    # sign-out: ended on every server

A forged, altered or expired value is refused by its MAC before any database is asked, and a
value for one tenant admits nobody in another. The store keeps a digest of the secret, never the
secret, so its rows cannot be replayed as cookies. Sign-out closes the session in the store, so
a copy of the cookie taken before is refused by every server in front of that database.
A session lasts SESSION_SECONDS; it is not the token, so it is no use to `/functions/`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from ket.serve.principal import Principal
from ket.serve.refusal import Refusal
from ket.store.contract import JobStore, SessionStore
from ket.store.types import DashboardSession

SESSION_SECONDS = 8 * 3_600
VERSION = "v1"


@dataclass(frozen=True, slots=True)
class Session:
    """A live session: who it admits, and its secret's digest (what binds a CSRF token)."""

    principal: Principal
    key: str


class Sessions:
    """Opens, finds and closes the dashboard's sessions (see the module's text)."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    async def open(self, store: JobStore, tenant: str, principal: Principal) -> str:
        """A new session of `principal` in `tenant`; the cookie's value."""
        expires = int(time.time()) + SESSION_SECONDS
        secret = secrets.token_urlsafe(32)
        session = DashboardSession(
            key=_digest(secret),
            subject=principal.subject,
            company=principal.company,
            permissions=tuple(sorted(principal.permissions)),
        )
        await _capable(store).session_open(session, ttl_seconds=SESSION_SECONDS)
        return f"{VERSION}.{tenant}.{expires}.{secret}.{self._mac(tenant, expires, secret)}"

    def secret_of(self, tenant: str, value: str) -> str | None:
        """The secret of the cookie `value` when this server made it for `tenant` and it has
        not expired; else None (asks no database)."""
        parts = value.split(".")
        if len(parts) != 5 or parts[0] != VERSION or parts[1] != tenant:
            return None
        _, _, expires, secret, mac = parts
        if not expires.isdigit() or int(expires) <= time.time():
            return None
        if not hmac.compare_digest(mac, self._mac(tenant, int(expires), secret)):
            return None
        return secret

    async def find(self, store: JobStore, secret: str) -> Session | None:
        """The live session of `secret` (from `secret_of`), or None."""
        if not isinstance(store, SessionStore):
            return None
        found = await store.session_find(_digest(secret))
        if found is None:
            return None
        principal = Principal(
            subject=found.subject,
            company=found.company,
            permissions=frozenset(found.permissions),
        )
        return Session(principal=principal, key=found.key)

    @staticmethod
    async def close(store: JobStore, key: str) -> None:
        """End the session of `key` (a live session's, `Session.key`)."""
        await _capable(store).session_close(key)

    def _mac(self, tenant: str, expires: int, secret: str) -> str:
        text = f"ket-dashboard-session\0{tenant}\0{expires}\0{secret}".encode()
        return hmac.new(self._key, text, hashlib.sha256).hexdigest()


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _capable(store: JobStore) -> SessionStore:
    if not isinstance(store, SessionStore):
        raise Refusal(501, "no_sessions", "this tenant's store cannot keep dashboard sessions")
    return store
