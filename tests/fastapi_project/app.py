"""The FastAPI example of docs/jobs.md ("From FastAPI"), as the module its test drives
(tests/integration/test_fastapi.py): an endpoint that writes an order through the request's
AsyncSession and enqueues its confirmation on that session, in the same transaction.

Keep it in step with the docs: the block there is this file from `class Base` down.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel
from sqlalchemy import String
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ket import define_deployment, define_job, define_module, open_async_client


async def confirm(ctx: Any, input: Any) -> None:
    ctx.log.info("order confirmed", order_id=input.order_id)


shop = define_module(
    name="shop",
    jobs={"confirm": define_job(input={"order_id": "id"}, idempotent=True, handler=confirm)},
)
main = define_deployment(name="main", modules=[shop])


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    number: Mapped[str] = mapped_column(String(20))


class NewOrder(BaseModel):
    number: str
    paid: bool = True


async def session(request: Request) -> AsyncIterator[AsyncSession]:
    """The request's session, in one transaction: committed when the endpoint returns, rolled
    back when it raises (an HTTPException included)."""
    async with request.app.state.sessions() as db, db.begin():
        yield db


Db = Annotated[AsyncSession, Depends(session)]
router = APIRouter()


@router.post("/orders", status_code=201)
async def create_order(order: NewOrder, request: Request, db: Db) -> dict[str, int]:
    row = Order(number=order.number)
    db.add(row)
    await db.flush()  # the order's id
    await request.app.state.jobs.aenqueue("shop.confirm", {"order_id": str(row.id)}, connection=db)
    if not order.paid:
        raise HTTPException(402, "payment required")  # the order and its job roll back
    return {"id": row.id}


def create_app(database_url: str) -> FastAPI:
    """The shop on `database_url` (postgresql://...), its tables made and `ket migrate` run."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_async_engine(database_url.replace("postgresql://", "postgresql+psycopg://"))
        app.state.sessions = async_sessionmaker(engine, expire_on_commit=False)
        async with await open_async_client(main, database_url=database_url) as jobs:
            app.state.jobs = jobs
            yield
        await engine.dispose()

    app = FastAPI(lifespan=lifespan)
    app.include_router(router)
    return app
