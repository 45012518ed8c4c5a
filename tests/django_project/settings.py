"""Settings of the small Django project the Django tests run (tests/integration/test_django.py).

The tests configure Django in their own process from these names (`configure`), and point the
`default` database at a fresh PostgreSQL database of each test's own; `lite` is a SQLite
database, to show that ket refuses to join a transaction there.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

SECRET_KEY = "ket-tests-only"
INSTALLED_APPS = ["tests.django_project.shop"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def databases(server_url: str, name: str) -> dict[str, dict[str, Any]]:
    """DATABASES: `default` is database `name` on the PostgreSQL server at `server_url`."""
    parts = urlsplit(server_url)
    return {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": parts.username or "",
            "PASSWORD": parts.password or "",
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
        },
        "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
    }


def configure(server_url: str, name: str) -> None:
    """Configure Django in this process (once) with these settings and `default` on `name`."""
    import django
    from django.conf import settings

    if settings.configured:
        return
    names = {key: value for key, value in globals().items() if key.isupper()}
    settings.configure(**names, DATABASES=databases(server_url, name))
    django.setup()
