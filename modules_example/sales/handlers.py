"""Handlers of the sales module: confirm an order, mail the customer, issue the invoice."""

from __future__ import annotations

from datetime import timedelta
from typing import Any


async def confirm_order(ctx: Any, input: Any) -> dict[str, Any]:
    """Mark the order confirmed and enqueue its mail and invoice in the same transaction."""

    async def confirm(tx: Any) -> dict[str, Any]:
        updated = await tx.db.update("sales.Order", {"id": input.order_id}, {"status": "confirmed"})
        if updated == 0:
            raise LookupError(f"no order with id {input.order_id!r}")
        mail = await tx.jobs.enqueue(
            "sales.send_confirmation",
            {"order_id": input.order_id},
            unique_key=f"confirmation:{input.order_id}",
        )
        invoice = await tx.jobs.enqueue(
            "sales.issue_invoice",
            {"order_id": input.order_id},
            run_at=ctx.now() + timedelta(minutes=5),
            priority=10,
            unique_key=f"invoice:{input.order_id}",
        )
        return {"confirmation_job": mail.id, "invoice_job": invoice.id}

    result: dict[str, Any] = await ctx.tx(confirm)
    return result


async def place_order(ctx: Any, input: Any) -> dict[str, Any]:
    """Create an order and confirm it: the row and its jobs commit together."""

    async def place(tx: Any) -> str:
        order_id: str = await tx.db.insert(
            "sales.Order", {"number": input.number, "email": input.email, "status": "new"}
        )
        return order_id

    order_id = await ctx.tx(place)
    confirmed = await confirm_order(ctx, _OrderRef(order_id=order_id))
    return {"order_id": order_id, **confirmed}


class _OrderRef:
    """The input confirm_order reads: just an order id."""

    def __init__(self, order_id: str) -> None:
        self.order_id = order_id


async def send_confirmation(ctx: Any, input: Any) -> None:
    """Mail the customer; the idempotency key makes a retried attempt send nothing twice."""
    order = await ctx.db.get("sales.Order", input.order_id)
    if order is None:
        ctx.log.info("order is gone, nothing to confirm", order_id=input.order_id)
        return
    await ctx.transport.send(
        {
            "idempotency_key": f"sales.confirmation:{order['id']}",
            "from": {"address": "orders@example.com", "name": "Orders"},
            "to": [{"address": order["email"]}],
            "subject": f"Order {order['number']}",
            "text": f"Your order {order['number']} is confirmed.",
        },
        signal=ctx.signal,
    )


def issue_invoice(ctx: Any, input: Any) -> None:
    """Write the invoice once per order (a plain handler: it runs off the event loop)."""
    if ctx.db.select("sales.Invoice", where={"order_id": input.order_id}, limit=1):
        return
    order = ctx.db.get("sales.Order", input.order_id)
    if order is None:
        return
    number = f"INV-{order['number']}"
    ctx.storage.put(f"invoices/{number}.txt", f"Invoice {number} for order {order['number']}\n")
    ctx.db.insert("sales.Invoice", {"order_id": order["id"], "number": number})
