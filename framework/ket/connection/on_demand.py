"""An engine made on first use and let go when unused: the SQL store's, for `ctx.db`, `ctx.tx`
and the commands (the worker's own statements run on the lane, ket.store.sql.lane).

This module imports no SQLAlchemy: a process whose handlers never use the engine never loads it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from ket.connection.url import DatabaseUrl

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)

# an OnDemandEngine with a linger lets its engine go once it sat unused this long
ENGINE_LINGER_SECONDS = 10.0


class OnDemandEngine:
    """An AsyncEngine made on first use and, given `linger`, let go once nobody used it for
    that long and none of its connections is out (the next use makes a new one).

    A worker serving a thousand tenants on PostgreSQL kept every tenant's engine after a single
    `ctx.db` call, with its pool, dialect, event listeners and compiled statements (about 50 KB
    each): the example app's 1,000 tenants idled at 202 MB with them, at 163 MB letting each go
    10 s after its last use. The budget closes an idle engine's connections after as long
    (budget.DEFAULT_IDLE_SECONDS), so the next use connects anew either way.
    """

    def __init__(
        self,
        url: DatabaseUrl,
        *,
        pool_size: int,
        options: dict[str, Any],
        linger: float | None = None,
    ) -> None:
        self._url = url
        self._pool_size = pool_size
        self._options = options
        self._linger = linger
        self._engine: AsyncEngine | None = None
        self._autocommit: AsyncEngine | None = None
        self._used = 0.0  # monotonic, when the engine was last handed out
        self._timer: asyncio.TimerHandle | None = None
        # engines being let go (a list: an empty set is 216 bytes, an engine a tenant)
        self._going: list[asyncio.Task[None]] = []

    @property
    def made(self) -> AsyncEngine | None:
        """The engine if one is made now, else None."""
        return self._engine

    def get(self) -> AsyncEngine:
        """The engine, made now if there is none."""
        engine = self._engine
        if engine is None:
            from ket.connection.engine import create_engine

            engine = self._engine = create_engine(
                self._url, pool_size=self._pool_size, **self._options
            )
            # one statement needs no BEGIN/COMMIT round trips on PostgreSQL; SQLite keeps
            # BEGIN IMMEDIATE for everything (see sqlite_discipline)
            if engine.dialect.name == "postgresql":
                self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
            self._arm(self._linger)
        self._used = time.monotonic()
        return engine

    @property
    def autocommit(self) -> AsyncEngine | None:
        """The engine `get()` gave, in autocommit mode (PostgreSQL); else None."""
        return self._autocommit

    def _arm(self, delay: float | None) -> None:
        if delay is None or self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # made off a loop: kept until closed
            return
        self._timer = loop.call_later(delay, self._let_go_if_unused)

    def _let_go_if_unused(self) -> None:
        self._timer = None
        engine, linger = self._engine, self._linger
        if engine is None or linger is None:
            return
        unused = time.monotonic() - self._used
        pool: Any = engine.sync_engine.pool
        if unused < linger or pool.checkedout():
            # a connection out counts as use (SQLAlchemy counts one still being opened too)
            self._arm(max(linger - unused, 1.0))
            return
        self._engine = self._autocommit = None
        task = asyncio.get_running_loop().create_task(_dispose(engine))
        self._going.append(task)
        task.add_done_callback(self._gone)

    def _gone(self, task: asyncio.Task[None]) -> None:
        if task in self._going:
            self._going.remove(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            shown = self._url.render_as_string(hide_password=True)
            log.warning("letting an unused engine of %s go failed: %r", shown, error)

    async def close(self) -> None:
        """Dispose of the engine (and wait for those being let go)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        engine, self._engine, self._autocommit = self._engine, None, None
        if self._going:
            await asyncio.gather(*self._going, return_exceptions=True)
        if engine is not None:
            await _dispose(engine)


async def _dispose(engine: AsyncEngine) -> None:
    from ket.connection.engine import close_idle

    if engine.dialect.name == "postgresql":
        # its idle connections first, each counted by the budget until its server process is
        # gone; dispose() would close them and forget them at once
        await close_idle(engine.sync_engine.pool)
    await engine.dispose()
