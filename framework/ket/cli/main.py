"""Entry point of the `ket` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ket.cli import call, check, dev, diff, jobs, manifest, migrate, tenants, worker
from ket.cli.options import workspace_parent
from ket.cli.runtime import database_parent
from ket.errors import CheckFailed, KetError

DECLARING = [manifest, check, diff]
RUNNING = [worker, dev, migrate, call]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command."""
    parser = argparse.ArgumentParser(
        prog="ket", description="Declarative, manifest-driven durable background jobs."
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    workspace, database = workspace_parent(), database_parent()
    for command in DECLARING:
        command.add_parser(commands, [workspace])
    for command in RUNNING:
        command.add_parser(commands, [workspace, database])
    tenants.add_parser(commands, [database])
    jobs.add_parser(commands, [database])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `ket` with `argv`; returns the exit code (0 ok, 1 findings, 2 bad input)."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except CheckFailed as failure:
        for message in failure.messages:
            sys.stderr.write(message.render() + "\n")
        sys.stderr.write("ket: the declarations have errors; fix them (see `ket check`)\n")
        return 1
    except KetError as error:
        sys.stderr.write(f"ket: error: {error.message}\n")
        return 2
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
