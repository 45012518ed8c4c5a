"""The distribution ket is installed from: its name on the package index and its version.

The import name and the command are `ket`; the distribution is `ket-jobs`, because `ket` on
the package index is another project. Messages that say what to install name it this way:
`pip install 'ket-jobs[s3]'`.
"""

from __future__ import annotations

NAME = "ket-jobs"


def version() -> str:
    """The installed distribution's version (`unknown` when ket runs from a plain checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(NAME)
    except PackageNotFoundError:
        return "unknown"
