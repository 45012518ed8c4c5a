"""The example app's sales module, tested the way an app developer tests with ket."""

from __future__ import annotations

from datetime import timedelta

import pytest
from modules_example.workspace import erp

from ket.testing import WorkerDisabled, create_test_deployment


def test_confirming_an_order_mails_the_customer_once() -> None:
    with create_test_deployment(erp) as e2e:
        order_id = e2e.db.insert(
            "sales.Order", {"number": "1001", "email": "ada@example.com", "status": "new"}
        )
        result = e2e.client.call("sales.confirm_order", {"order_id": order_id})
        order = e2e.db.get("sales.Order", order_id)
        assert order is not None and order["status"] == "confirmed"
        assert e2e.drain_jobs() == 1  # the mail; the invoice waits five minutes
        assert [m["subject"] for m in e2e.transport.sent] == ["Order 1001"]
        assert e2e.transport.sent[0]["to"] == [{"address": "ada@example.com"}]
        [mail] = e2e.jobs(name="sales.send_confirmation")
        assert (mail.id, mail.state, mail.unique_key) == (
            result["confirmation_job"],
            "completed",
            f"confirmation:{order_id}",
        )


def test_the_invoice_is_issued_five_minutes_later_exactly_once() -> None:
    with create_test_deployment(erp) as e2e:
        placed = e2e.client.call(
            "sales.place_order", {"number": "1002", "email": "bob@example.com"}
        )
        e2e.drain_jobs()
        assert e2e.db.select("sales.Invoice") == []
        [invoice_job] = e2e.jobs(name="sales.issue_invoice")
        assert invoice_job.state == "scheduled"
        e2e.clock.advance(minutes=5)
        assert e2e.drain_jobs() == 1
        [invoice] = e2e.db.select("sales.Invoice")
        assert (invoice["order_id"], invoice["number"]) == (placed["order_id"], "INV-1002")
        # confirming again coalesces with nothing active and issues no second invoice
        e2e.client.call("sales.confirm_order", {"order_id": placed["order_id"]})
        e2e.clock.advance(minutes=5)
        e2e.drain_jobs()
        assert len(e2e.db.select("sales.Invoice")) == 1


def test_a_failed_transaction_leaves_neither_the_update_nor_the_jobs() -> None:
    with create_test_deployment(erp) as e2e:
        with pytest.raises(LookupError, match="no order with id 'missing'"):
            e2e.client.call("sales.confirm_order", {"order_id": "missing"})
        assert e2e.jobs() == []


def test_a_mail_for_a_vanished_order_completes_without_sending() -> None:
    with create_test_deployment(erp) as e2e:
        mail = e2e.enqueue("sales.send_confirmation", {"order_id": "gone"})
        assert e2e.drain_jobs() == 1  # a missing order is logged and skipped, not failed
        [record] = e2e.jobs(name="sales.send_confirmation")
        assert (record.id, record.state, record.errors) == (mail.id, "completed", ())
        assert e2e.transport.sent == []


def test_worker_false_keeps_jobs_queued_and_refuses_to_run_them() -> None:
    with create_test_deployment(erp, worker=False) as e2e:
        e2e.enqueue(
            "sales.send_confirmation",
            {"order_id": "o1"},
            run_at=e2e.clock.now() + timedelta(hours=1),
        )
        [job] = e2e.jobs()
        assert (job.state, job.run_at) == ("scheduled", e2e.clock.now() + timedelta(hours=1))
        with pytest.raises(WorkerDisabled):
            e2e.drain_jobs()


def test_a_company_scoped_job_runs_with_its_company() -> None:
    with create_test_deployment(erp) as e2e:
        e2e.enqueue("hotel.close_day", {"business_date": "2030-01-15"}, company="c1")
        assert e2e.drain_jobs() == 1
        [closed] = e2e.db.select("hotel.DayClose")
        assert (closed["company"], str(closed["business_date"])) == ("c1", "2030-01-15")
