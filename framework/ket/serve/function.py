"""`POST /functions/<module>.<function>`: call a function with the JSON body as its input.

Admitted by the gate (tenant, then authentication), then: 404 for a function the deployment
does not declare, 403 without the `call:<name>` permission (or for a function that touches
company-scoped models when the principal has no company and the function is not
cross_company), 413/415/400 for a body that is too large, not JSON or not UTF-8, 422 with the
field errors for input its model refuses (validated strictly, as the OpenAPI document describes
it: no `"5"` for an int), 200 with the result. A function that meets the tenant's database
away answers 503 with `Retry-After`. A function that raises answers 500 with a generic body;
the server's log has the exception (redacted as a job's error is) under the request id the
body names.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_core import to_jsonable_python
from starlette.requests import Request
from starlette.responses import Response

from ket.catalog import Catalog, OperationSpec
from ket.errors import RecordRejected, StoreUnavailable
from ket.runtime.call import call_function, redactor
from ket.runtime.outcome import describe, trace_of
from ket.serve.body import read_input, validate_input
from ket.serve.gate import Caller, Gate
from ket.serve.principal import CALL
from ket.serve.refusal import Refusal
from ket.serve.stores import TenantStores

log = logging.getLogger("ket.serve")

PREFIX = "/functions/"


class FunctionEndpoint:
    """The ASGI endpoint that calls the deployment's functions."""

    def __init__(self, catalog: Catalog, gate: Gate, stores: TenantStores) -> None:
        self._catalog = catalog
        self._gate = gate
        self._stores = stores
        self._cap = catalog.serve.max_body_bytes
        self._scoped = {
            name: _touches_company_data(catalog, spec) for name, spec in catalog.functions.items()
        }

    async def handle(self, request: Request) -> Response:
        name: str = request.path_params["name"]
        caller = await self._gate.admit(request)
        spec = self._catalog.functions.get(name)
        if spec is None:
            raise Refusal(404, "unknown_function", f"no function {name!r} in this deployment")
        self._gate.require(caller, f"{CALL}:{name}")
        if caller.principal.company is None and self._scoped[name]:
            raise Refusal(
                403,
                "company_required",
                f"{name} works on company data and {caller.principal.subject!r} acts for no "
                "company",
            )
        body = await read_input(request, self._cap)
        try:
            # strict, from the JSON text: the input is what the published schema says, so
            # `"5"` or `true` for an int field is refused rather than coerced
            payload = validate_input(spec.input_model, body)
        except ValidationError as error:
            raise Refusal(
                422, "invalid_input", f"invalid input for {name}", detail=field_errors(error)
            ) from None
        contexts = await self._stores.contexts(caller.tenant, caller.url)
        try:
            result = await call_function(
                self._catalog, contexts, name, payload, company=caller.principal.company
            )
        except RecordRejected as error:
            # the store refused a value the input carried (text with a NUL, an int past 64
            # bits): the caller's to mend, named without quoting the value
            raise Refusal(
                422,
                "value_rejected",
                f"{name} could not store a value: {error.model}.{error.field}: {error.problem}",
            ) from None
        except StoreUnavailable as error:  # the database is away, not the function's bug
            raise self._stores.unavailable(caller.tenant, error) from None
        except Exception as error:
            raise self._failed(name, body.value, caller, error) from None
        return _result(result, name)

    def _failed(
        self, name: str, payload: Mapping[str, Any], caller: Caller, error: Exception
    ) -> Refusal:
        """Log what the function raised, redacted, under a request id; the generic answer."""
        request_id = uuid.uuid4().hex[:16]
        hidden = redactor(self._catalog, [(name, payload)])
        log.error(
            "request %s: %s raised (tenant %s, subject %s): %s\n%s",
            request_id,
            name,
            caller.tenant,
            caller.principal.subject,
            describe(error, hidden),
            trace_of(error, hidden),
        )
        return Refusal(
            500, "function_failed", f"{name} failed; the server's log has request {request_id}"
        )


def field_errors(error: ValidationError) -> list[dict[str, Any]]:
    """pydantic's errors as `{loc, msg, type}`: never the input value they refused."""
    return [
        {"loc": list(item["loc"]), "msg": item["msg"], "type": item["type"]}
        for item in error.errors(include_url=False, include_input=False, include_context=False)
    ]


def _result(result: Any, name: str) -> Response:
    try:
        text = json.dumps(
            to_jsonable_python(result, fallback=str),
            ensure_ascii=True,
            allow_nan=False,
            separators=(",", ":"),
        )
    except ValueError as error:  # NaN or infinity, which JSON has no words for
        log.error("%s returned a result JSON cannot carry: %s", name, error)
        raise Refusal(
            500, "result_not_json", f"{name} returned a result that JSON cannot carry"
        ) from None
    return Response(text, 200, media_type="application/json")


def _touches_company_data(catalog: Catalog, spec: OperationSpec) -> bool:
    """Whether the function reads or writes a model that has a `company` field, and so can run
    only for a company unless it is cross_company (see ket.context.db)."""
    if spec.cross_company:
        return False
    for effect in spec.effects:
        model = catalog.models.get(effect.target)
        if effect.verb in ("read", "write") and model is not None and "company" in model.fields:
            return True
    return False
