"""`ket diff OLD [NEW]`: classify what changed between two manifests."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from ket.cli.options import deployment_of
from ket.cli.output import escape


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser(
        "diff",
        parents=parents,
        help="compare two manifests",
        description="Compare manifest OLD with NEW (default: the current declarations) and "
        "classify each change as breaking, review or safe.",
    )
    parser.add_argument("old", metavar="OLD", help="the older manifest file")
    parser.add_argument("new", metavar="NEW", nargs="?", help="the newer manifest file")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument(
        "--exit-code", action="store_true", help="exit 1 when any change is breaking"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ket.diff import diff_manifests, has_breaking, render_json, render_text
    from ket.manifest import (  # the manifest room (and YAML): only for this command
        compile_manifest,
        read_manifest,
    )

    old = read_manifest(args.old)
    new = read_manifest(args.new) if args.new else compile_manifest(deployment_of(args))
    changes = diff_manifests(old, new)
    if args.format == "json":
        text = render_json(changes)  # JSON escapes every control character itself
    else:
        # field and job names come from the manifest files, which a pull request controls
        text = render_text(
            [replace(c, subject=escape(c.subject), message=escape(c.message)) for c in changes]
        )
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 1 if args.exit_code and has_breaking(changes) else 0
