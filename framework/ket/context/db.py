"""`ctx.db`: the deployment's model rows, within the running operation's declared effects.

    order = await ctx.db.get("sales.Order", input.order_id)        # needs read:sales.Order
    await ctx.db.update("sales.Order", {"id": order["id"]}, {"status": "confirmed"})
                                                                  # needs write:sales.Order

`write:<model>` also allows reading it. Every row has an `id` the store generates. A plain
handler calls the same methods without `await`.

A model with a field named `company` is company-scoped. An operation that does not declare
`cross_company` sees only its own company's rows: filters get `company` added, inserts get it
filled in, and one that runs for no company may not touch such a model at all (that would read
across companies).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from ket.catalog import OperationSpec
from ket.context.part import Part
from ket.errors import EffectError, StoreError
from ket.store.contract import Records
from ket.store.types import ModelTable, Where

Access = Literal["read", "write"]


class Database(Part):
    """Model rows as the running operation may touch them; an undeclared access is EffectError."""

    __ket_api__ = True  # the Blocking adapter wraps it for plain handlers
    # The records and the operation are the context's business: mangled slots, off the
    # documented surface (see __dir__). Effects are a contract checked here, not a sandbox.
    __slots__ = ("__company", "__models", "__operation", "__records")

    def __init__(
        self,
        records: Records,
        operation: OperationSpec,
        models: Mapping[str, ModelTable],
        company: str | None = None,
    ) -> None:
        self.__records = records
        self.__operation = operation
        self.__models = models
        self.__company = company

    async def insert(self, model: str, values: Mapping[str, Any]) -> str:
        """Insert a row; returns the id ket generated for it."""
        self.__check("write", model)
        return await self.__records.record_insert(model, self.__scoped("write", model, values))

    async def get(self, model: str, id: str) -> dict[str, Any] | None:
        """The row with that id as a dict (with `id`), or None."""
        self.__check("read", model)
        if self.__company_scoped(model):
            rows = await self.__records.record_select(
                model, self.__scoped("read", model, {"id": id}), 1
            )
            return rows[0] if rows else None
        return await self.__records.record_get(model, id)

    async def select(
        self, model: str, where: Where | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Rows whose fields equal every value in `where`, oldest first, at most `limit`."""
        self.__check("read", model)
        return await self.__records.record_select(
            model, self.__scoped("read", model, where or {}), limit
        )

    async def update(self, model: str, where: Where, values: Mapping[str, Any]) -> int:
        """Set `values` on the rows matching `where`; returns how many rows matched."""
        self.__check("write", model)
        if self.__company_scoped(model) and "company" in values:
            self.__scoped("write", model, values)  # moving a row to another company is refused
        return await self.__records.record_update(
            model, self.__scoped("write", model, where), values
        )

    async def delete(self, model: str, where: Where) -> int:
        """Delete the rows matching `where`; returns how many."""
        self.__check("write", model)
        return await self.__records.record_delete(model, self.__scoped("write", model, where))

    def __company_scoped(self, model: str) -> bool:
        return not self.__operation.cross_company and "company" in self.__models[model].fields

    def __scoped(self, access: Access, model: str, where: Mapping[str, Any]) -> Mapping[str, Any]:
        """`where` (or values) limited to the running company, for company-scoped models."""
        if not self.__company_scoped(model):
            return where
        operation = self.__operation
        if self.__company is None:
            raise EffectError(
                f"{operation.name} may not {access} {model} across companies: it runs for no "
                "company; declare cross_company=True, or enqueue it with company=..."
            )
        given = where.get("company", self.__company)
        if given != self.__company:
            raise EffectError(
                f"{operation.name} runs for company {self.__company!r} and may not {access} "
                f"{model} rows of company {given!r}: declare cross_company=True"
            )
        return {**where, "company": self.__company}

    def __check(self, access: Access, model: str) -> None:
        operation = self.__operation
        if model not in self.__models:
            known = ", ".join(sorted(self.__models)) or "none"
            raise StoreError(
                f"{operation.name}: unknown model {model!r} (the deployment's models: {known})"
            )
        if not operation.allows(access, model):
            raise EffectError(
                f"{operation.name} may not {access} {model}: declare the effect '{access}:{model}'"
            )

    def __repr__(self) -> str:
        return f"Database({self.__operation.name})"


class NoRecords:
    """The Records of a store that keeps no model rows: every call says so (StoreError).

    `ctx.db` exists for every handler; on such a store, using it is the error, not building it.
    """

    def __init__(self, store: object) -> None:
        self._store = type(store).__name__

    async def record_insert(self, model: str, values: Mapping[str, Any]) -> str:
        raise self._refused()

    async def record_get(self, model: str, record_id: str) -> dict[str, Any] | None:
        raise self._refused()

    async def record_select(
        self, model: str, where: Where | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        raise self._refused()

    async def record_update(self, model: str, where: Where, values: Mapping[str, Any]) -> int:
        raise self._refused()

    async def record_delete(self, model: str, where: Where) -> int:
        raise self._refused()

    def _refused(self) -> StoreError:
        return StoreError(f"store {self._store} keeps no model rows (it is not a RecordStore)")


def records_of(source: object) -> Records:
    """`source` (a store or a store transaction) as Records, or NoRecords when it keeps none."""
    return source if isinstance(source, Records) else NoRecords(source)
