"""The OpenAPI 3.1 document of the server: one POST operation per function, its request body
the function's input model (the same JSON schema the manifest records), the authentication
scheme, the tenant header and every answer the server can give."""

from __future__ import annotations

import hashlib
import inspect
import json
from typing import Any

from pydantic.json_schema import models_json_schema

from ket.catalog import Catalog, OperationSpec
from ket.serve.function import PREFIX
from ket.serve.tenant import TENANT_HEADER
from ket.store.tenant import RESERVED_TENANT_NAMES, TENANT_PATTERN

SCHEME = "ket"
_ERROR = {"$ref": "#/components/schemas/KetError"}
_REFUSALS = {
    "400": "the body is not JSON or not UTF-8, or the tenant is missing or malformed",
    "401": "not authenticated",
    "403": "authenticated, but the principal may not call this function",
    "404": "no such function, or no such tenant",
    "413": "the body is larger than the server's cap",
    "415": "the body is not sent as application/json",
    "500": "the function failed (the server's log has the request id the message names)",
    "503": "the tenant's database cannot be reached now",
}


def openapi_document(catalog: Catalog) -> dict[str, Any]:
    """The document, built from the catalog's functions and serve configuration."""
    functions = sorted(catalog.functions.items())
    refs, top = models_json_schema(
        [(spec.input_model, "validation") for _, spec in functions],
        ref_template="#/components/schemas/{model}",
    )
    schemas: dict[str, Any] = {**top.get("$defs", {}), **_ERROR_SCHEMAS}
    paths = {
        f"{PREFIX}{name}": {"post": _operation(name, spec, refs[(spec.input_model, "validation")])}
        for name, spec in functions
    }
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": f"{catalog.deployment} functions", "version": "0"},
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "securitySchemes": {SCHEME: dict(catalog.serve.security_scheme)},
        },
        "security": [{SCHEME: []}],
    }
    # the version changes exactly when the document does, so a client can tell
    digest = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
    document["info"]["version"] = digest[:12]
    return document


def _operation(name: str, spec: OperationSpec, schema: Any) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": name,
        "summary": _summary(spec) or f"call {name}",
        "parameters": [
            {
                "name": TENANT_HEADER.title(),
                "in": "header",
                "required": False,
                "description": "the tenant; needed when the server serves several and the host "
                "names none",
                # the tenant grammar, reserved names excepted (they are refused with 400)
                "schema": {
                    "type": "string",
                    "pattern": f"^{TENANT_PATTERN}$",
                    "not": {"enum": sorted(RESERVED_TENANT_NAMES)},
                },
            }
        ],
        "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
        "responses": {
            "200": {
                "description": "the function's result",
                "content": {"application/json": {"schema": {}}},
            },
            "422": {
                "description": (
                    "the input does not fit the function's input model (invalid_input), or the "
                    "store refused a value it carried (value_rejected)"
                ),
                "content": {
                    "application/json": {
                        "schema": {
                            "anyOf": [
                                {"$ref": "#/components/schemas/KetInputError"},
                                _ERROR,
                            ]
                        }
                    }
                },
            },
            **{
                status: {"description": text, "content": {"application/json": {"schema": _ERROR}}}
                for status, text in _REFUSALS.items()
            },
        },
    }
    return operation


def _summary(spec: OperationSpec) -> str:
    """The first line of the handler's docstring."""
    doc = inspect.getdoc(spec.handler) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


_ERROR_SCHEMAS: dict[str, Any] = {
    "KetError": {
        "type": "object",
        "properties": {
            "error": {"type": "string", "description": "a stable code, e.g. unknown_function"},
            "message": {"type": "string"},
        },
        "required": ["error", "message"],
    },
    "KetInputError": {
        "type": "object",
        "properties": {
            "error": {"type": "string", "const": "invalid_input"},
            "message": {"type": "string"},
            "detail": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "loc": {"type": "array", "items": {"type": ["string", "integer"]}},
                        "msg": {"type": "string"},
                        "type": {"type": "string"},
                    },
                    "required": ["loc", "msg", "type"],
                },
            },
        },
        "required": ["error", "message", "detail"],
    },
}
