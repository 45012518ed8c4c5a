"""Entry point of the `ket` command.

Every failure ends in one line on standard error and an exit code from docs/cli.md: a ket error
(bad input, a command that could not run) is its message and 2; anything unexpected is named in
one line with a hint, also 2, and shows its traceback only with `--debug` or `KET_DEBUG=1`.

Only the module of the command being run is imported (`ket check` loads no runtime and no
store, `ket worker` no manifest room); without a command, or with an unknown one, every command
is loaded so that help and errors list them all.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn, cast

from ket import distribution
from ket.cli.options import workspace_parent
from ket.cli.output import clip, escape
from ket.cli.runtime import database_parent
from ket.errors import CheckFailed, KetError

# every command, in the order `ket --help` lists them, with the options it shares: a module of
# ket.cli of the same name adds its parser (`add_parser(commands, parents)`)
STARTING = ["init"]  # no shared options
DECLARING = ["manifest", "check", "diff"]  # workspace options
RUNNING = [
    "worker",
    "serve",
    "dev",
    "migrate",
    "call",
    "schedules",
    "queues",
]  # workspace, database
OPERATING = ["tenants", "workers", "jobs", "uninstall"]  # database options
# a value that argparse takes for an option: a dash, then a digit (`-1d`, `-5`)
_NEGATIVE_LOOKING = re.compile(r"-[0-9]\S*")
# Ctrl-C outside `ket worker` and `ket dev`, as a shell reports a command that SIGINT ended.
INTERRUPTED = 130


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors escaped: they quote the command line, which may hold
    control characters; and a value that starts with '-' and a digit (`--older-than -1d`)
    taken as the value of the option before it, which argparse took for an option and refused
    as "expected one argument": the option's own check then names it."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._joined(given), namespace)

    def _joined(self, args: list[str]) -> list[str]:
        """`--option -1d` as `--option=-1d` where this parser's `--option` takes one value."""
        out: list[str] = []
        for arg in args:
            previous = out[-1] if out else ""
            action = self._option_string_actions.get(previous)
            if (
                _NEGATIVE_LOOKING.fullmatch(arg)
                and previous.startswith("--")
                and action is not None
                and action.nargs is None
                and action.option_strings
                and action.const is None
            ):
                out[-1] = f"{previous}={arg}"
            else:
                out.append(arg)
        return out

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:  # argparse joins them with spaces: an empty or blank one would not show
            self.error(f"unrecognized arguments: {' '.join(repr(extra) for extra in extras)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {escape(clip(message, 1000))}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every command (or only the command `only`)."""
    parser = Parser(prog="ket", description="Declarative, manifest-driven durable background jobs.")
    parser.add_argument("--version", action="version", version=f"ket {distribution.version()}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of an unexpected error (also KET_DEBUG=1)",
    )
    # every parser under it is a Parser too (argparse makes subparsers of the parent's class)
    commands = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(title="commands", metavar="COMMAND", required=True),
    )
    workspace, database = workspace_parent(), database_parent()
    for names, parents in (
        (STARTING, []),
        (DECLARING, [workspace]),
        (RUNNING, [workspace, database]),
        (OPERATING, [database]),
    ):
        for name in names:
            if only is None or name == only:
                importlib.import_module(f"ket.cli.{name}").add_parser(commands, parents)
    return parser


def command_named(argv: Sequence[str]) -> str | None:
    """The command `argv` runs (its first word that is no option), if it is one of ket's and
    no help is asked for before it; else None."""
    for word in argv:
        if word in ("-h", "--help"):
            return None
        if not word.startswith("-"):
            return word if word in (*STARTING, *DECLARING, *RUNNING, *OPERATING) else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run `ket` with `argv`; returns the exit code (0 ok, 1 findings, 2 bad input)."""
    words = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser(command_named(words)).parse_args(words)
    except SystemExit as done:  # --help, or a usage error argparse has printed
        return done.code if isinstance(done.code, int) else 0 if done.code is None else 2
    except KeyboardInterrupt:  # Ctrl-C while the command's modules load
        sys.stderr.write("ket: interrupted\n")
        return INTERRUPTED
    debug: bool = args.debug or os.environ.get("KET_DEBUG") == "1"
    try:
        return _run(args, debug)
    except KeyboardInterrupt:
        sys.stderr.write("ket: interrupted\n")
        return INTERRUPTED
    except Exception as error:
        if debug:
            raise
        sys.stderr.write(
            f"ket: error: unexpected {type(error).__name__}: {escape(clip(str(error)))} "
            "(this is a bug; rerun with --debug or KET_DEBUG=1 to see its traceback)\n"
        )
        return 2


def _run(args: argparse.Namespace, debug: bool) -> int:
    try:
        code: int = args.run(args)
    except CheckFailed as failure:
        for message in failure.messages:
            sys.stderr.write(escape(message.render(), keep_newlines=True) + "\n")
        sys.stderr.write("ket: the declarations have errors; fix them (see `ket check`)\n")
        return 1
    except KetError as error:
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"ket: error: {escape(error.message)}\n")
        return 2
    except BrokenPipeError:
        _silence_stdout()
        return 0
    return code


def _silence_stdout() -> None:
    # the reader went away (`ket jobs list | head`): without this, flushing stdout at exit
    # would raise BrokenPipeError once more and print it
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (tests capture stdout)
        pass


if __name__ == "__main__":
    sys.exit(main())
