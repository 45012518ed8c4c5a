"""`pgq` exactly as installed, with one crash taken out, so `pgq run` can start.

PgQueuer 1.6.0 declares `--log-level` with `parser=lambda x: x.upper()`; with the typer installed
here (0.29) that parser's string reaches `logconfig.setup_fancy_logger`, which reads `level.name`
and raises AttributeError before the worker starts, whatever the level given. This wraps that one
function to accept a level name; option parsing, the factory, the supervisor and the worker loop
are the CLI's own. Run as `python3 pgq_cli.py run peer_app:create [--batch-size N]`.
"""

from __future__ import annotations

import sys

from pgqueuer.__main__ import main
from pgqueuer.core import logconfig

_setup = logconfig.setup_fancy_logger


def _setup_by_name(level: logconfig.LogLevel | str) -> None:
    _setup(logconfig.LogLevel[level] if isinstance(level, str) else level)


if __name__ == "__main__":
    logconfig.setup_fancy_logger = _setup_by_name
    main()
    sys.exit(0)
