"""Sales: orders, their confirmation mail and their invoice."""

from ket import define_function, define_job, define_model, define_module
from modules_example.sales.handlers import (
    confirm_order,
    issue_invoice,
    place_order,
    send_confirmation,
)

sales = define_module(
    name="sales",
    models={
        "Order": define_model({"number": "string", "email": "string", "status": "string"}),
        "Invoice": define_model({"order_id": "id", "number": "string"}),
    },
    functions={
        "place_order": define_function(
            input={"number": "string", "email": "string"},
            effects=[
                "write:sales.Order",
                "enqueue:sales.send_confirmation",
                "enqueue:sales.issue_invoice",
            ],
            handler=place_order,
        ),
        "confirm_order": define_function(
            input={"order_id": "id"},
            effects=[
                "write:sales.Order",
                "enqueue:sales.send_confirmation",
                "enqueue:sales.issue_invoice",
            ],
            handler=confirm_order,
        ),
    },
    jobs={
        "send_confirmation": define_job(
            queue="mail",
            input={"order_id": "id"},
            effects=["read:sales.Order", "transport:send"],
            idempotent=True,
            max_attempts=8,
            timeout_ms=30_000,
            handler=send_confirmation,
        ),
        "issue_invoice": define_job(
            input={"order_id": "id"},
            effects=["read:sales.Order", "write:sales.Invoice", "storage:write"],
            idempotent=True,
            max_attempts=10,
            timeout_ms=60_000,
            tags=["billing"],  # `ket jobs list --tag billing`
            handler=issue_invoice,
        ),
    },
)
