"""The keys that seal secret input fields at rest: `KET_SECRET_KEYS`, Fernet keys newest first.

    KET_SECRET_KEYS="<new key>,<old key>"

New secrets are sealed with the first key; a sealed secret opens with any key of the list, so a
key is rotated by putting a new one in front and dropping the old one once no job sealed with it
is left. A key is made with::

    python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"

`cryptography` is imported only when keys are configured; it comes with
`pip install 'ket-jobs[secrets]'`.
No message here ever quotes a key or a sealed value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from ket.errors import SecretKeyError

if TYPE_CHECKING:
    from cryptography.fernet import MultiFernet

KEYS_VARIABLE = "KET_SECRET_KEYS"


class UnopenableSecret(SecretKeyError):
    """A sealed secret opens with none of the keys in KET_SECRET_KEYS."""


class SecretKeys:
    """Fernet keys, newest first: `seal` uses the first, `open` accepts any."""

    def __init__(self, keys: Sequence[str]) -> None:
        fernet = _cryptography()
        if not keys:
            raise SecretKeyError(f"{KEYS_VARIABLE} holds no key")
        ciphers = []
        for position, key in enumerate(keys, start=1):
            try:
                ciphers.append(fernet.Fernet(key.strip()))
            except (ValueError, TypeError):
                raise SecretKeyError(
                    f"{KEYS_VARIABLE}: key {position} of {len(keys)} is not a Fernet key "
                    "(32 url-safe base64-encoded bytes, as Fernet.generate_key() makes)"
                ) from None
        self._cipher: MultiFernet = fernet.MultiFernet(ciphers)
        self.count = len(ciphers)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> SecretKeys | None:
        """The keys `KET_SECRET_KEYS` lists (comma-separated), or None when it is unset or empty."""
        text = (os.environ if environ is None else environ).get(KEYS_VARIABLE, "").strip()
        if not text:
            return None
        return cls([key for key in text.split(",") if key.strip()] or [""])

    def seal(self, plain: str) -> str:
        """`plain` sealed with the newest key: a Fernet token (it records when it was made)."""
        return self._cipher.encrypt(plain.encode("utf-8")).decode("ascii")

    def open(self, token: str) -> str:
        """The text sealed in `token`, or UnopenableSecret when no key opens it."""
        fernet = _cryptography()
        try:
            return self._cipher.decrypt(token.encode("ascii")).decode("utf-8")
        except (fernet.InvalidToken, UnicodeError):
            raise UnopenableSecret(
                f"it opens with none of the {self.count} keys in {KEYS_VARIABLE}; was the key that "
                "sealed it removed?"
            ) from None

    def __repr__(self) -> str:  # never the keys themselves
        return f"SecretKeys({self.count} keys)"


def generate_key() -> str:
    """A new random Fernet key, for `KET_SECRET_KEYS`."""
    key: bytes = _cryptography().Fernet.generate_key()
    return key.decode("ascii")


def _cryptography() -> ModuleType:
    """`cryptography.fernet`, or SecretKeyError saying how to install it."""
    try:
        from cryptography import fernet
    except ImportError:
        raise SecretKeyError(
            f"{KEYS_VARIABLE} is set but the cryptography package is not installed; "
            "install it with: pip install 'ket-jobs[secrets]'"
        ) from None
    return fernet
