"""The company comes from the principal, and a function's cross_company rule applies as in
`ket call`: on SQLite and on PostgreSQL."""

from __future__ import annotations

from tests.unit.serve.conftest import Serve, auth
from tests.unit.serve.shop import deployment


def test_functions_see_only_their_principals_company_unless_cross_company(
    serve: Serve, tenant_database: str
) -> None:
    client = serve(deployment(), template=tenant_database)
    for token, text in (("admin", "north note"), ("south", "south note")):
        answer = client.post("/functions/shop.add_note", json={"text": text}, headers=auth(token))
        assert answer.status_code == 200, answer.text
    seen = {
        token: client.post("/functions/shop.notes", json={}, headers=auth(token)).json()
        for token in ("admin", "south")
    }
    assert seen == {"admin": ["north note"], "south": ["south note"]}
    everything = client.post("/functions/shop.all_notes", json={}, headers=auth("south"))
    assert everything.json() == ["north note", "south note"]


def test_a_principal_of_no_company_may_not_call_a_function_on_company_data(
    serve: Serve, tenant_database: str
) -> None:
    client = serve(deployment(), template=tenant_database)
    answer = client.post("/functions/shop.add_note", json={"text": "x"}, headers=auth("robot"))
    assert (answer.status_code, answer.json()["error"]) == (403, "company_required")
    # a cross_company function is not scoped to a company: it runs for no company too
    assert client.post("/functions/shop.all_notes", json={}, headers=auth("robot")).json() == []


def test_a_value_the_store_cannot_hold_is_the_callers_422_and_nothing_is_written(
    serve: Serve, tenant_database: str
) -> None:
    client = serve(deployment(), template=tenant_database)
    text = "north\x00note"
    answer = client.post("/functions/shop.add_note", json={"text": text}, headers=auth("admin"))
    assert answer.status_code == 422
    assert answer.json() == {
        "error": "value_rejected",
        "message": "shop.add_note could not store a value: "
        "shop.Note.text: text must not contain NUL characters",
    }
    assert "north" not in answer.text  # the value itself is not echoed
    assert client.post("/functions/shop.notes", json={}, headers=auth("admin")).json() == []
