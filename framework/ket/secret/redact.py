"""Hiding secrets in the texts ket stores and logs about an attempt: its error and traceback.

Two layers, in order. First the values of the job's secret input fields are replaced by `***`
wherever they appear (also as Python's repr, ascii() or JSON would escape them); values shorter
than SHORTEST_SECRET characters are left alone, since hiding them would garble ordinary words. Then
the deployment's `redact` hook, if it declares one, is given the text and returns what may be
stored and logged. A hook that raises, or returns something other than a string, raises
RedactionFailed: the caller then keeps only the exception's type name.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ket.secret.field import REDACTED

log = logging.getLogger("ket.worker")

Redact = Callable[[str], str]
SHORTEST_SECRET = 4


class RedactionFailed(Exception):
    """The deployment's redact hook failed; the text it was given is withheld."""


@dataclass(frozen=True, slots=True)
class Redactor:
    """Replaces known secret values by `***`, then applies the deployment's hook."""

    secrets: tuple[str, ...] = ()
    hook: Redact | None = None

    @classmethod
    def of(cls, secrets: Iterable[str], hook: Redact | None = None) -> Redactor:
        """A redactor for these secret values (and the forms escaping gives them)."""
        if hook is None and not secrets:  # the common case: a job with no secrets, no hook
            return NO_REDACTION
        forms: set[str] = set()
        for secret in secrets:
            if len(secret) >= SHORTEST_SECRET:
                forms |= {
                    secret,
                    repr(secret)[1:-1],
                    ascii(secret)[1:-1],
                    json.dumps(secret)[1:-1],
                    json.dumps(secret, ensure_ascii=False)[1:-1],
                }
        # longest first, so that a secret containing another is hidden whole
        return cls(secrets=tuple(sorted(forms, key=lambda form: (-len(form), form))), hook=hook)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        if self.hook is None:
            return text
        try:
            result = self.hook(text)
        except Exception as error:
            # the hook's own message may quote the text: only its type is kept
            log.warning("the deployment's redact hook raised %s", type(error).__name__)
            raise RedactionFailed() from None
        if not isinstance(result, str):
            log.warning(
                "the deployment's redact hook returned %s instead of a string",
                type(result).__name__,
            )
            raise RedactionFailed()
        return result


NO_REDACTION = Redactor()
