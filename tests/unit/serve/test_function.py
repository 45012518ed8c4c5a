"""POST /functions/<name>: what a client of the server sees, answer by answer."""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from ket import define_deployment
from ket.serve import AuthRequest
from tests.unit.serve.conftest import Serve, auth
from tests.unit.serve.shop import authenticate_plainly, deployment, shop

CALL = "/functions/shop.echo"


def test_a_function_answers_200_with_its_result(serve: Serve) -> None:
    client = serve(deployment())
    answer = client.post(CALL, json={"text": "hi", "count": 2}, headers=auth("admin"))
    assert (answer.status_code, answer.json()) == (200, {"text": "hi", "count": 2})
    assert answer.headers["content-type"] == "application/json"


def test_a_plain_handler_runs_for_the_tenant_and_the_principals_company(serve: Serve) -> None:
    client = serve(deployment())
    answer = client.post("/functions/shop.where", content=b"", headers=auth("south"))
    assert answer.json() == {"tenant": "default", "company": "south"}


def test_invalid_input_answers_422_with_each_field_error_and_no_input_echoed(
    serve: Serve,
) -> None:
    client = serve(deployment())
    answer = client.post(CALL, json={"count": "many", "extra": 1}, headers=auth("admin"))
    assert answer.status_code == 422
    body = answer.json()
    assert body["error"] == "invalid_input"
    assert {(tuple(e["loc"]), e["type"]) for e in body["detail"]} == {
        (("text",), "missing"),
        (("count",), "int_type"),
        (("extra",), "extra_forbidden"),
    }
    assert all(set(e) == {"loc", "msg", "type"} for e in body["detail"])
    assert "many" not in answer.text


def test_input_is_validated_as_strictly_as_the_published_schema_says(serve: Serve) -> None:
    # `ket call` would coerce "5" and true to ints; over HTTP the schema is the contract
    client = serve(deployment())
    for count in ("5", True, 5.5):
        answer = client.post(CALL, json={"text": "hi", "count": count}, headers=auth("admin"))
        assert answer.status_code == 422, count


def test_a_number_without_a_fraction_is_an_integer_as_json_schema_says(serve: Serve) -> None:
    client = serve(deployment())
    answer = client.post(CALL, content=b'{"text": "hi", "count": 4.0}', headers=auth("admin"))
    assert answer.json() == {"text": "hi", "count": 4}


def test_a_body_that_is_not_an_object_answers_422(serve: Serve) -> None:
    answer = serve(deployment()).post(CALL, json=["hi"], headers=auth("admin"))
    assert (answer.status_code, answer.json()["error"]) == (422, "invalid_input")


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"text": ', "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[" * 5_000 + b"]" * 5_000, "nested 5000 levels deep"),
        (b'{"text": "hi", "count": NaN}', "NaN is not JSON"),
        (b'{"text": "hi", "count": 1e999}', "out of range"),
    ],
)
def test_a_body_that_is_not_json_answers_400(serve: Serve, body: bytes, why: str) -> None:
    answer = serve(deployment()).post(CALL, content=body, headers=auth("admin"))
    assert (answer.status_code, answer.json()["error"]) == (400, "bad_json")
    assert why in answer.json()["message"]


def test_a_body_sent_as_anything_but_json_answers_415(serve: Serve) -> None:
    headers = {**auth("admin"), "Content-Type": "text/plain"}
    answer = serve(deployment()).post(CALL, content=b'{"text": "hi"}', headers=headers)
    assert answer.status_code == 415


def test_no_token_or_a_wrong_one_answers_401_with_a_challenge(serve: Serve) -> None:
    client = serve(deployment())
    for headers in ({"Content-Type": "application/json"}, auth("forged")):
        answer = client.post(CALL, json={"text": "hi"}, headers=headers)
        assert (answer.status_code, answer.json()["error"]) == (401, "unauthenticated")
        assert answer.headers["www-authenticate"] == 'Bearer realm="ket"'


def test_a_principal_without_the_permission_answers_403(serve: Serve) -> None:
    client = serve(deployment())
    refused = client.post(CALL, json={"text": "hi"}, headers=auth("nobody"))
    assert (refused.status_code, refused.json()["error"]) == (403, "forbidden")
    assert "call:shop.echo" in refused.json()["message"]
    # call:shop.echo grants that function and no other
    assert client.post(CALL, json={"text": "hi"}, headers=auth("echoer")).status_code == 200
    other = client.post("/functions/shop.where", json={}, headers=auth("echoer"))
    assert other.status_code == 403


def test_an_unknown_function_answers_404_but_only_to_an_authenticated_caller(
    serve: Serve,
) -> None:
    client = serve(deployment())
    known = client.post("/functions/shop.nope", json={}, headers=auth("admin"))
    assert (known.status_code, known.json()["error"]) == (404, "unknown_function")
    anonymous = client.post("/functions/shop.nope", json={}, headers={})
    assert anonymous.status_code == 401  # no caller learns which functions exist
    assert client.post("/nowhere", json={}, headers=auth("admin")).status_code == 404


def test_get_on_a_function_answers_405_allowing_post(serve: Serve) -> None:
    answer = serve(deployment()).get(CALL, headers=auth("admin"))
    assert (answer.status_code, answer.json()["error"]) == (405, "method_not_allowed")
    assert answer.headers["allow"] == "POST"


def test_a_body_over_the_cap_answers_413_declared_or_streamed(serve: Serve) -> None:
    client = serve(deployment(max_body_bytes=1_000))
    big = b'{"text": "' + b"x" * 2_000 + b'"}'
    assert client.post(CALL, content=big, headers=auth("admin")).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield big[:900]
        yield big[900:]

    streamed = client.post(CALL, content=chunks(), headers=auth("admin"))
    assert (streamed.status_code, streamed.json()["error"]) == (413, "body_too_large")
    fits = b'{"text": "' + b"x" * 900 + b'"}'
    assert client.post(CALL, content=fits, headers=auth("admin")).status_code == 200


def test_without_an_authenticator_every_request_answers_401(serve: Serve) -> None:
    client = serve(define_deployment(name="shop", modules=[shop]))
    for path in (CALL, "/functions/shop.nope"):
        answer = client.post(path, json={"text": "hi"}, headers=auth("admin"))
        assert answer.status_code == 401
        assert "declares no authenticator" in answer.json()["message"]
    assert client.get("/openapi.json", headers=auth("admin")).status_code == 401


def test_a_plain_authenticator_works_as_an_async_one(serve: Serve) -> None:
    client = serve(deployment(authenticate=authenticate_plainly))
    assert client.post(CALL, json={"text": "hi"}, headers=auth("admin")).status_code == 200
    assert client.post(CALL, json={"text": "hi"}, headers=auth("forged")).status_code == 401


def test_an_authenticator_that_raises_or_answers_nonsense_refuses_with_500(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    def raises(request: object) -> None:
        raise RuntimeError("token service down")

    def nonsense(request: object) -> str:
        return "admin"

    for authenticate in (raises, nonsense):
        client = serve(deployment(authenticate=authenticate))
        with caplog.at_level(logging.ERROR, logger="ket.serve"):
            answer = client.post(CALL, json={"text": "hi"}, headers=auth("admin"))
        assert (answer.status_code, answer.json()["error"]) == (500, "authentication_failed")
    assert "token service down" in caplog.text
    assert "returned str, not a Principal" in caplog.text


def test_an_authenticator_that_raises_is_logged_without_the_credentials_it_was_given(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    def quotes(request: AuthRequest) -> None:
        header, cookies = request.headers["authorization"], request.headers["cookie"]
        raise PermissionError(
            f"token {request.bearer_token()!r} unknown (header {header}, cookie "
            f"{cookies.partition('=')[2]}, key {request.headers['x-api-key']}) for ACCT-1234"
        )

    hides_accounts = define_deployment(
        name="shop",
        modules=[shop],
        serve={"authenticate": quotes},
        redact=lambda text: text.replace("ACCT-1234", "ACCT-****"),
    )
    client = serve(hides_accounts)
    headers = auth("tok-9Qz7Lm2", cookie="session=sess-4Hk8Pw1", x_api_key="key-3Vb6Nc0")
    message = _authenticator_failure(client, headers, caplog)
    assert (
        "PermissionError: token '***' unknown (header ***, cookie ***, key ***) for ACCT-****"
    ) in message
    assert "test_function.py" in message  # the traceback says where it raised
    for secret in ("tok-9Qz7Lm2", "sess-4Hk8Pw1", "key-3Vb6Nc0", "ACCT-1234"):
        assert secret not in caplog.text


def test_an_authenticator_quoting_a_basic_password_is_logged_without_it(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    def quotes(request: AuthRequest) -> None:
        encoded = request.headers["authorization"].partition(" ")[2]
        user, _, password = base64.b64decode(encoded).decode().partition(":")
        raise PermissionError(f"user {user!r} has no password {password!r}")

    client = serve(deployment(authenticate=quotes))
    pair = base64.b64encode(b"ada:pw-5Tr8Gx4").decode()
    headers = {"Authorization": f"Basic {pair}", "Content-Type": "application/json"}
    message = _authenticator_failure(client, headers, caplog)
    assert "PermissionError: user 'ada' has no password '***'" in message
    assert "pw-5Tr8Gx4" not in caplog.text and pair not in caplog.text


def test_an_authenticator_failing_the_same_way_is_logged_once_a_minute_every_token_alike(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    # a flood of requests whose cookie or token makes the authenticator raise cost a logged
    # traceback each: with its credentials hidden, the same failure is one line a minute
    def quotes(request: AuthRequest) -> None:
        raise LookupError(f"no such token {request.bearer_token()!r}")

    client = serve(deployment(authenticate=quotes))
    with caplog.at_level(logging.ERROR, logger="ket.serve"):
        for n in range(20):
            answer = client.post(CALL, json={"text": "hi"}, headers=auth(f"tok-{n:04d}-guess"))
            assert (answer.status_code, answer.json()["error"]) == (500, "authentication_failed")
    logged = [
        r.getMessage() for r in caplog.records if "the authenticator raised" in r.getMessage()
    ]
    assert len(logged) == 1 and "LookupError: no such token '***'" in logged[0]
    assert "tok-0" not in caplog.text


def _authenticator_failure(
    client: TestClient, headers: dict[str, str], caplog: pytest.LogCaptureFixture
) -> str:
    """What the server logged of the authenticator's failure on one call (answered 500)."""
    with caplog.at_level(logging.ERROR, logger="ket.serve"):
        answer = client.post(CALL, json={"text": "hi"}, headers=headers)
    assert (answer.status_code, answer.json()["error"]) == (500, "authentication_failed")
    [record] = [r for r in caplog.records if "the authenticator raised" in r.getMessage()]
    return record.getMessage()


def test_a_function_that_raises_answers_500_without_its_text_and_logs_it_redacted(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    client = serve(deployment())
    with caplog.at_level(logging.ERROR, logger="ket.serve"):
        answer = client.post(
            "/functions/shop.pay", json={"card": "4111-1111"}, headers=auth("admin")
        )
    assert (answer.status_code, answer.json()["error"]) == (500, "function_failed")
    assert "4111" not in answer.text and "declined" not in answer.text
    [record] = [r for r in caplog.records if "shop.pay raised" in r.getMessage()]
    request_id = answer.json()["message"].rsplit(" ", 1)[-1]
    assert request_id in record.getMessage()
    assert "RuntimeError: card *** was declined" in record.getMessage()
    assert "4111" not in caplog.text


def test_a_result_json_cannot_carry_answers_500(serve: Serve) -> None:
    answer = serve(deployment()).post("/functions/shop.nan", json={}, headers=auth("admin"))
    assert (answer.status_code, answer.json()["error"]) == (500, "result_not_json")
