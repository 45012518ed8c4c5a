"""`ctx.jobs`: enqueue from a handler, within its declared effects."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from ket.catalog import Catalog, EnqueueOptions, OperationSpec
from ket.context.part import Part
from ket.due import RunAt, RunIn
from ket.errors import EffectError
from ket.store.types import Inserted, NewJob

Insert = Callable[[Sequence[NewJob]], Awaitable[list[Inserted]]]
Item = tuple[str, BaseModel | Mapping[str, Any] | None] | tuple[str, Any, Mapping[str, Any]]


class Jobs(Part):
    """Enqueue jobs as the running operation; undeclared enqueues raise EffectError.

    A job is enqueued for the company the operation runs for, unless a `cross_company`
    operation names another: work done for a company stays that company's.
    """

    __ket_api__ = True
    # the catalog and the store's insert are the context's business: mangled slots, off the
    # documented surface (see __dir__)
    __slots__ = ("__catalog", "__company", "__insert", "__operation")

    def __init__(
        self,
        catalog: Catalog,
        operation: OperationSpec,
        insert: Insert,
        company: str | None = None,
    ) -> None:
        self.__catalog = catalog
        self.__operation = operation
        self.__insert = insert
        self.__company = company

    async def enqueue(
        self,
        name: str,
        input: BaseModel | Mapping[str, Any] | None = None,
        *,
        run_at: RunAt | None = None,
        run_in: RunIn | None = None,
        priority: int | None = None,
        unique_key: str | None = None,
        company: str | None = None,
        tags: list[str] | tuple[str, ...] | None = None,
        expires_in: RunIn | None = None,
    ) -> Inserted:
        """Enqueue one job; returns its id and whether it coalesced with an active one.

        `run_at`: an aware datetime or an ISO-8601 text with an offset; `run_in`: a delay (a
        timedelta, seconds, or `"90s"`, `"5m"`, `"2h"`, `"1d"`) from the store's now."""
        options = EnqueueOptions.given(
            run_at=run_at,
            run_in=run_in,
            priority=priority,
            unique_key=unique_key,
            company=self.__company if company is None else company,  # the attempt's by default
            tags=tags,
            expires_in=expires_in,
        )
        job = self.__build(name, input, options)
        [inserted] = await self.__insert([job])
        return inserted

    async def enqueue_many(self, items: Sequence[Item]) -> list[Inserted]:
        """Enqueue many jobs in one round trip: `(name, input)` or `(name, input, options)`."""
        jobs = []
        for item in items:
            name, input, *rest = item
            options = EnqueueOptions.of(name, rest[0] if rest else None, company=self.__company)
            jobs.append(self.__build(name, input, options))
        return await self.__insert(jobs)

    def __build(
        self,
        name: str,
        input: BaseModel | Mapping[str, Any] | None,
        options: EnqueueOptions,
    ) -> NewJob:
        operation = self.__operation
        if not operation.allows("enqueue", name):
            raise EffectError(
                f"{operation.name} may not enqueue {name!r}: declare the effect 'enqueue:{name}'"
            )
        company = options.company  # the attempt's, unless another was given
        if company != self.__company and not operation.cross_company:
            raise EffectError(
                f"{operation.name} may not enqueue for company {company!r}: "
                "declare cross_company=True"
            )
        return self.__catalog.new_job(name, input, options)
