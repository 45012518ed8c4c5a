"""AuditLog: the operators' actions (statements in ket.store.sql.audit)."""

from __future__ import annotations

from ket.store import validate
from ket.store.sql.capabilities.session import SqlSession
from ket.store.types import AuditEntry, AuditQuery, AuditRecord


class SqlAuditLog(SqlSession):
    """The audit log."""

    async def audit_append(self, entry: AuditEntry) -> AuditRecord:
        """Record an operator's action at the store's now."""
        selection = validate.check_audit_entry(entry)
        now = self._now()
        from ket.store.sql import audit

        return await self._transact(lambda conn: audit.append(conn, entry, selection, now))

    async def audit_list(self, query: AuditQuery) -> list[AuditRecord]:
        """A page of the audit log, newest first."""
        validate.check_audit_query(query)
        from ket.store.sql import audit

        return await self._transact(lambda conn: audit.page(conn, query), single=True)
