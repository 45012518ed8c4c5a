"""Reading a manifest file that may be hostile: a pull request controls it in CI.

A canonical manifest is plain YAML written by `ket manifest`: no anchors or aliases, numbers of a
few digits, a nesting depth in the tens, a size in kilobytes. Anything else is refused before it
can cost memory or time:

- files that are not regular files (a folder, a FIFO, a device such as /dev/zero) are refused
  from `stat`, and opened without blocking (O_NONBLOCK) in case one is swapped in meanwhile;
- files over MAX_MANIFEST_BYTES are refused before parsing, and no more is ever read;
- anchors and aliases (the "billion laughs" expansion) are refused as soon as the parser meets one;
- nesting deeper than MAX_MANIFEST_DEPTH is refused while composing, before any recursion runs deep;
- numbers longer than MAX_NUMBER_LENGTH characters are refused (huge or sexagesimal integers cost
  time quadratic in their length);
- a key repeated in one mapping is refused (YAML keeps the last one, a reviewer reads the first).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent, CollectionStartEvent, Event
from yaml.nodes import MappingNode, Node, ScalarNode

from ket.errors import ManifestError

MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_MANIFEST_DEPTH = 64
MAX_NUMBER_LENGTH = 100


class Refused(yaml.YAMLError):
    """YAML that is valid but never found in a manifest; `problem_mark` says where."""

    def __init__(self, problem: str, mark: object) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


class ManifestLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors, aliases, deep nesting, long numbers and repeated keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # The scanner reads ahead past open `[` and `{` (each may start a key) before the composer
        # sees them: refuse deep flow nesting as the scanner meets it, not megabytes later.
        if self.flow_level >= MAX_MANIFEST_DEPTH:
            raise Refused(f"nested more than {MAX_MANIFEST_DEPTH} levels deep", self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event: Event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent):
            raise Refused(
                f"YAML alias *{event.anchor} refused: a manifest never contains aliases",
                event.start_mark,
            )
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            raise Refused(
                f"YAML anchor &{anchor} refused: a manifest never contains anchors",
                event.start_mark,
            )
        if isinstance(event, CollectionStartEvent):
            self._depth += 1
            if self._depth > MAX_MANIFEST_DEPTH:
                raise Refused(
                    f"nested more than {MAX_MANIFEST_DEPTH} levels deep", event.start_mark
                )
        try:
            node = super().compose_node(parent, index)
        finally:
            if isinstance(event, CollectionStartEvent):
                self._depth -= 1
        if isinstance(node, MappingNode):
            _refuse_duplicate_keys(node)
        return node

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as error:  # "0b_", "2024-02-31": matched, not valid
            raise Refused(f"cannot read {_start(node)}: {error}", node.start_mark) from None

    def construct_short_number(self, node: ScalarNode) -> Any:
        """An int or float scalar, refused past MAX_NUMBER_LENGTH characters."""
        if len(node.value) > MAX_NUMBER_LENGTH:
            raise Refused(
                f"a number of {len(node.value)} characters refused: a manifest's numbers "
                f"are at most {MAX_NUMBER_LENGTH} characters",
                node.start_mark,
            )
        if node.tag.endswith(":int"):
            return self.construct_yaml_int(node)
        return self.construct_yaml_float(node)


ManifestLoader.add_constructor("tag:yaml.org,2002:int", ManifestLoader.construct_short_number)
ManifestLoader.add_constructor("tag:yaml.org,2002:float", ManifestLoader.construct_short_number)


def _refuse_duplicate_keys(node: MappingNode) -> None:
    # YAML keeps the last of two equal keys; a reviewer reads the first
    seen: set[tuple[str, str]] = set()
    for key, _ in node.value:
        if isinstance(key, ScalarNode):
            if (key.tag, key.value) in seen:
                raise Refused(
                    f"key {_start(key)} repeated: a manifest never repeats a key",
                    key.start_mark,
                )
            seen.add((key.tag, key.value))


def _start(node: Node) -> str:
    value = node.value if isinstance(node.value, str) else ""
    return repr(value[:40] + ("..." if len(value) > 40 else ""))


def parse_yaml(text: str) -> Any:
    """The YAML document in `text`; yaml.YAMLError (Refused included) when it is not one."""
    loader = ManifestLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def check_size(size: int, origin: str) -> None:
    """Refuse a manifest of more than MAX_MANIFEST_BYTES bytes."""
    if size > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"{origin}: {size} bytes, over the manifest size limit of {MAX_MANIFEST_BYTES} bytes"
        )


def read_text(path: str | Path) -> str:
    """The text of a manifest file, refused unless it is a regular file within the size cap."""
    shown = repr(os.fspath(path))
    try:
        before = os.stat(path)
        _check_regular(before, shown)
        check_size(before.st_size, f"manifest file {shown}")
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            after = os.fstat(descriptor)
            _check_regular(after, shown)
            data = _read_capped(descriptor)
        finally:
            os.close(descriptor)
    except FileNotFoundError:
        raise ManifestError(f"manifest file {shown} does not exist") from None
    except OSError as error:
        raise ManifestError(f"cannot read manifest file {shown}: {error.strerror}") from None
    except ValueError as error:  # a NUL in the path
        raise ManifestError(f"cannot read manifest file {shown}: {error}") from None
    check_size(len(data), f"manifest file {shown}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ManifestError(
            f"cannot read manifest file {shown}: not UTF-8 (byte {data[error.start]:#04x} at "
            f"offset {error.start}: {error.reason})"
        ) from None


def _read_capped(descriptor: int) -> bytes:
    """Up to MAX_MANIFEST_BYTES + 1 bytes: one past the cap shows a file that grew since stat."""
    chunks: list[bytes] = []
    left = MAX_MANIFEST_BYTES + 1
    while left > 0 and (chunk := os.read(descriptor, left)):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular(status: os.stat_result, shown: str) -> None:
    if stat.S_ISREG(status.st_mode):
        return
    kind = next((name for test, name in _KINDS if test(status.st_mode)), "something else")
    raise ManifestError(f"cannot read manifest file {shown}: it is {kind}, not a regular file")
