"""`ket manifest`: print or write the deployment's manifest."""

from __future__ import annotations

import argparse

from ket.cli.options import deployment_of, write_output


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser(
        "manifest",
        parents=parents,
        help="print the deployment's manifest as YAML",
        description="Compile the deployment's declarations into its canonical YAML manifest.",
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ket.manifest import (  # the manifest room (and YAML): only for this command
        compile_manifest,
        dump_manifest,
    )

    manifest = compile_manifest(deployment_of(args))
    write_output(dump_manifest(manifest), args.output)
    return 0
