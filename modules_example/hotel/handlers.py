"""Handlers of the hotel module: reconcile bookings, close the business day per company."""

from __future__ import annotations

from typing import Any


async def catch_up(ctx: Any, input: Any) -> None:
    """Reconcile whatever a webhook may have dropped: count bookings still pending."""
    pending = await ctx.db.select("hotel.Booking", where={"status": "pending"})
    ctx.log.info("catch-up sweep", pending=len(pending), tick=str(ctx.schedule.tick))


async def night_audit(ctx: Any, input: Any) -> None:
    """Fan the night audit out: one close_day job per company, each scoped to its company."""
    business_date = ctx.schedule.tick.date().isoformat()
    for company in await ctx.db.select("company.Company"):
        ctx.signal.throw_if_aborted()
        await ctx.jobs.enqueue(
            "hotel.close_day",
            {"business_date": business_date},
            company=str(company["id"]),
            unique_key=f"close_day:{company['id']}:{business_date}",
        )
    if ctx.schedule.skipped:
        ctx.log.warning("night audit missed runs", skipped=ctx.schedule.skipped)


def close_day(ctx: Any, input: Any) -> None:
    """Close one company's business day: record how many nights were sold (plain handler)."""
    day = {"company": ctx.company, "business_date": input.business_date}
    if ctx.db.select("hotel.DayClose", where=day, limit=1):
        return  # already closed: running twice changes nothing
    checked_in = ctx.db.select(
        "hotel.Booking", where={"company": ctx.company, "status": "checked_in"}
    )
    ctx.db.insert(
        "hotel.DayClose", {**day, "nights": sum(booking["nights"] for booking in checked_in)}
    )
