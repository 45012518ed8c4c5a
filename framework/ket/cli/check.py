"""`ket check`: validate the declarations and report findings."""

from __future__ import annotations

import argparse
import sys

from ket.check import Level, run_checks, summary, tags
from ket.cli.options import deployment_of
from ket.cli.output import escape, print_json
from ket.declare.resolve import default_timezone

LEVELS = [level.label for level in Level]


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser(
        "check",
        parents=parents,
        help="validate the declarations",
        description="Validate the deployment's declarations; exit 1 on findings at or above "
        "--fail-level.",
    )
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument(
        "--fail-level",
        choices=LEVELS,
        default="error",
        help="lowest level that makes the command fail (default: error)",
    )
    parser.add_argument(
        "--tag",
        action="append",
        choices=tags(),
        metavar="TAG",
        help=f"run only checks with this tag (repeatable): {', '.join(tags())}",
    )
    parser.set_defaults(run=run)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def run(args: argparse.Namespace) -> int:
    deployment = deployment_of(args)
    messages = run_checks(deployment, timezone=default_timezone(), only=args.tag)
    fail_level = Level[args.fail_level.upper()]
    failed = any(m.level >= fail_level for m in messages)
    if args.format == "json":
        document = {
            "deployment": deployment.name,
            "ok": not failed,
            "messages": [m.to_json() for m in messages],
        }
        print_json(document)
    else:
        for message in messages:
            sys.stdout.write(escape(message.render(), keep_newlines=True) + "\n")
        modules = len(deployment.modules)
        jobs = sum(1 for _ in deployment.jobs())
        sys.stdout.write(
            f"ket check: deployment {deployment.name!r} ({_count(modules, 'module')}, "
            f"{_count(jobs, 'job')}): {summary(messages)}\n"
        )
    return 1 if failed else 0
