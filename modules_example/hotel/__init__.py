"""Hotel: bookings, a 15-minute catch-up, and the night audit at 03:00 hotel time."""

from ket import define_job, define_model, define_module
from modules_example.hotel.handlers import catch_up, close_day, night_audit

hotel = define_module(
    name="hotel",
    models={
        "Booking": define_model(
            {"company": "id", "room": "string", "status": "string", "nights": "int"}
        ),
        "DayClose": define_model({"company": "id", "business_date": "date", "nights": "int"}),
    },
    jobs={
        "catch_up": define_job(
            idempotent=True,
            effects=["read:hotel.Booking"],
            schedule={"every": "15m"},
            cross_company=True,  # it reconciles the bookings of every company
            handler=catch_up,
        ),
        "night_audit": define_job(
            queue="maintenance",
            idempotent=True,
            effects=["read:company.Company", "enqueue:hotel.close_day"],
            schedule={"daily_at": "03:00", "timezone": "Asia/Ho_Chi_Minh"},
            cross_company=True,
            timeout_ms=120_000,
            handler=night_audit,
        ),
        "close_day": define_job(
            queue="maintenance",
            input={"business_date": "date"},
            effects=["read:hotel.Booking", "write:hotel.DayClose"],
            idempotent=True,
            handler=close_day,
        ),
    },
)
