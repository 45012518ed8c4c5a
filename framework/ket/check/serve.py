"""`ket serve`: a valid `serve={...}`, and an authenticator that can take the request."""

from __future__ import annotations

from ket.check.code import Subject, finding
from ket.check.message import CheckMessage
from ket.check.operation import accepts, signature_text
from ket.check.registry import CheckContext, register
from ket.declare import resolve
from ket.errors import DeclarationError


@register("serve")
def check_serve(context: CheckContext) -> list[CheckMessage]:
    deployment = context.deployment
    where = Subject(obj=f"deployment {deployment.name}", source=deployment.source)
    try:
        config = resolve.serve_config(deployment)
    except DeclarationError as error:
        return [finding("KET601", error.message, where)]
    authenticate = config.authenticate
    if authenticate is not None and not accepts(authenticate, 1):
        name = resolve.callable_name(authenticate)
        return [
            finding(
                "KET602",
                f"authenticator {name}{signature_text(authenticate)} cannot be called with "
                "(request)",
                where,
            )
        ]
    return []
