"""`ket serve` against a token guesser (issue 27, item 5): before, 300 wrong bearer tokens in
0.3 s were each put to the authenticator, and the right one was accepted at once after them."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import httpx2 as httpx

from ket.serve.throttle import FREE_FAILURES
from tests.acceptance.conftest import Project, run_ket
from tests.acceptance.test_cli_serve import SERVED, TOKEN, Server, start  # noqa: F401 (the fixture)


def test_a_client_guessing_tokens_waits_and_other_clients_do_not(
    project: Project,
    start: Callable[..., Server],  # noqa: F811
) -> None:
    root = project({"app/workspace.py": SERVED})
    assert run_ket("migrate", cwd=root).code == 0
    server = start(root, "serve")
    call = server.url + "/functions/app.nap"
    with httpx.Client(timeout=30) as client:
        answers = Counter(
            client.post(
                call, json={"seconds": 0}, headers={"Authorization": f"Bearer guess{n}"}
            ).status_code
            for n in range(300)
        )
        # the authenticator heard the free guesses and the one that began the wait; the rest
        # waited, refused without asking it
        assert answers[401] <= FREE_FAILURES + 3, answers
        assert answers[401] + answers[429] == 300, answers
        right = client.post(call, json={"seconds": 0}, headers=TOKEN)
        assert right.status_code == 429, right.text
        assert right.json()["error"] == "too_many_failures"
        wait = int(right.headers["retry-after"])
        assert 1 <= wait <= 60
        # a client on another address is not held back (the server sees 127.0.0.2)
        with httpx.Client(
            timeout=30, transport=httpx.HTTPTransport(local_address="127.0.0.2")
        ) as other:
            assert other.post(call, json={"seconds": 0}, headers=TOKEN).status_code == 200
        time.sleep(wait + 0.2)
        assert client.post(call, json={"seconds": 0}, headers=TOKEN).status_code == 200
    code, output = server.stop()
    assert code == 0, output
    assert "authentication throttled: client 127.0.0.1 failed" in output
    assert "guess" not in output  # no token is logged
