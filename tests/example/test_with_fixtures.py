"""The example app tested through ket's pytest fixtures, as docs/testing.md shows them."""

from __future__ import annotations

from ket.testing import TestDeployment


def test_confirming_an_order_queues_its_mail(ket_e2e: TestDeployment) -> None:
    order_id = ket_e2e.db.insert(
        "sales.Order", {"number": "1001", "email": "ada@example.com", "status": "new"}
    )
    ket_e2e.client.call("sales.confirm_order", {"order_id": order_id})
    mail = ket_e2e.assert_enqueued("sales.send_confirmation", {"order_id": order_id})
    assert mail.unique_key == f"confirmation:{order_id}"
    ket_e2e.refute_enqueued("sales.issue_invoice", {"order_id": "someone-else"})
    assert ket_e2e.drain_jobs() == 1


def test_the_mail_of_a_deleted_order_goes_to_nobody(ket_e2e: TestDeployment) -> None:
    performed = ket_e2e.perform_job("sales.send_confirmation", {"order_id": "deleted"})
    assert (performed.outcome, ket_e2e.transport.sent) == ("completed", [])
