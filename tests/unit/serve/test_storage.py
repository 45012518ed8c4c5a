"""`ket serve` runs functions with the blob backend it is given: here, an S3 bucket on moto's
server (the worker and `ket call` are tested the same way in tests/integration)."""

from __future__ import annotations

from typing import Any

from ket import define_deployment, define_function, define_module
from ket.serve import AuthRequest, Principal
from ket.storage import blobs_from_url
from tests.s3_server import S3Server
from tests.unit.serve.conftest import Serve


async def keep(ctx: Any, input: Any) -> None:
    await ctx.storage.put(input.key, input.text)


async def read(ctx: Any, input: Any) -> str | None:
    data = await ctx.storage.get(input.key)
    return None if data is None else data.decode()


async def let_anyone(request: AuthRequest) -> Principal:
    return Principal(subject="test", permissions={"call:*"})


FILES = define_deployment(
    name="files",
    modules=[
        define_module(
            name="files",
            functions={
                "keep": define_function(
                    input={"key": "string", "text": "string"},
                    effects=["storage:write"],
                    handler=keep,
                ),
                "read": define_function(
                    input={"key": "string"}, effects=["storage:read"], handler=read
                ),
            },
        )
    ],
    serve={"authenticate": let_anyone},
)
JSON = {"Content-Type": "application/json"}


def test_functions_served_over_http_keep_blobs_in_the_backend_the_server_is_given(
    s3_server: S3Server, s3_bucket: str, serve: Serve
) -> None:
    client = serve(FILES, blobs=blobs_from_url(s3_server.url(s3_bucket)))
    kept = client.post("/functions/files.keep", json={"key": "k.txt", "text": "kept"}, headers=JSON)
    read = client.post("/functions/files.read", json={"key": "k.txt"}, headers=JSON)
    assert (kept.status_code, read.status_code, read.json()) == (200, 200, "kept")
    assert s3_server.objects(s3_bucket) == {"ket/default/k.txt": b"kept"}
