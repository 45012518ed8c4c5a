"""Secret input fields: which values are secret, sealing them at rest, keeping them out of texts.

    field.py   envelopes in a stored payload: seal at enqueue, open for the handler, redact
    key.py     KET_SECRET_KEYS: Fernet keys newest first (MultiFernet), imported only when set
    redact.py  an attempt's error texts without its secret values, then the deployment's hook

This room depends on pydantic and ket.errors alone; the catalog, the runtime, the client and the
CLI use it.
"""

from ket.secret.field import (
    REDACTED,
    clear_secrets,
    holds_secrets,
    open_payload,
    plain_payload,
    plain_payloads,
    redact_payload,
    seal_payload,
)
from ket.secret.key import KEYS_VARIABLE, SecretKeys, UnopenableSecret, generate_key
from ket.secret.redact import NO_REDACTION, Redact, RedactionFailed, Redactor

__all__ = [
    "KEYS_VARIABLE",
    "NO_REDACTION",
    "REDACTED",
    "Redact",
    "RedactionFailed",
    "Redactor",
    "SecretKeys",
    "UnopenableSecret",
    "clear_secrets",
    "generate_key",
    "holds_secrets",
    "open_payload",
    "plain_payload",
    "plain_payloads",
    "redact_payload",
    "seal_payload",
]
