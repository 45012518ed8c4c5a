"""Hostile manifests: `ket diff` reads files a pull request controls.

Each attack is refused with one line naming the file and the reason, exit status 2, in well under
a second of work (the refusal's CPU time is taken in-process, so a busy machine does not inflate
it; an attack that got through would cost minutes; the CLI run adds only the interpreter's start).
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from ket.errors import ManifestError
from ket.manifest import read_manifest
from ket.manifest.loader import MAX_MANIFEST_BYTES, MAX_MANIFEST_DEPTH, parse_yaml
from ket.manifest.schema import MAX_INLINED_DEPTH, MAX_INLINED_NODES, MAX_INLINED_TOTAL
from tests.acceptance.conftest import REPO, run_ket

COMMITTED = REPO / "manifests" / "erp.yaml"
# a line of the committed manifest inside the input schema of job hotel.catch_up
CATCH_UP_INPUT = "          title: hotel.catch_up\n"


def _with_input_lines(tmp_path: Path, lines: list[str], name: str = "hostile.yaml") -> Path:
    """The committed manifest with `lines` added to the input schema of hotel.catch_up."""
    text = COMMITTED.read_text(encoding="utf-8")
    assert text.count(CATCH_UP_INPUT) == 1
    path = tmp_path / name
    path.write_text(text.replace(CATCH_UP_INPUT, CATCH_UP_INPUT + "".join(lines)), encoding="utf-8")
    return path


# What refusing a hostile manifest may hold in memory at its peak: the largest refusal here
# peaks near 8.5 MB, the reported attack grew without bound. Memory, not time: it does not vary
# with what else the machine is doing.
REFUSAL_PEAK_BYTES = 32 * 1024 * 1024


def _refused(path: Path | str) -> str:
    """The message `read_manifest(path)` refuses with, asserting it got there without building
    what the manifest asks for (its peak memory stays under REFUSAL_PEAK_BYTES)."""
    tracemalloc.start()
    try:
        with pytest.raises(ManifestError) as raised:
            read_manifest(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < REFUSAL_PEAK_BYTES, f"refusing {path} held {peak:,} bytes at its peak"
    return raised.value.message


def _cli_refuses(path: Path | str, reason: str) -> None:
    result = run_ket("diff", str(path), str(COMMITTED))
    assert result.code == 2, result.err
    assert result.out == ""
    [line] = result.err.splitlines()
    assert line.startswith("ket: error: ")
    assert str(path) in line
    assert reason in line
    assert "Traceback" not in result.err


def _alias_bomb(levels: int = 9) -> list[str]:
    """A billion laughs: 9 ** 9 strings from a few hundred bytes, as `examples` of the input."""
    lines = ["          examples:\n", "          - &l0 [" + ", ".join(["lol"] * 9) + "]\n"]
    for level in range(1, levels):
        lines.append(f"          - &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]\n")
    return lines


def test_alias_bomb_in_a_jobs_input_is_refused_at_the_first_anchor(tmp_path: Path) -> None:
    bomb = _alias_bomb()
    path = _with_input_lines(tmp_path, [*bomb, *[f"          # {'x' * 90}\n"] * 20])
    assert 6_000 < path.stat().st_size < 9_000  # the reported attack: 7 KB
    message = _refused(path)
    line = 1 + COMMITTED.read_text(encoding="utf-8").splitlines().index(CATCH_UP_INPUT[:-1]) + 2
    assert message == (
        f"{path}:{line}:13: YAML anchor &l0 refused: a manifest never contains anchors"
    )
    _cli_refuses(path, "YAML anchor &l0 refused")


def test_alias_without_its_anchor_in_the_same_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "alias.yaml"
    path.write_text("format: 1\nmodules: *everything\n", encoding="utf-8")
    assert _refused(path) == (
        f"{path}:2:10: YAML alias *everything refused: a manifest never contains aliases"
    )


def test_merge_key_from_an_anchor_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "merge.yaml"
    path.write_text("base: &b {x: 1}\nformat: 1\nother:\n  <<: *b\n", encoding="utf-8")
    assert "YAML anchor &b refused" in _refused(path)


def test_deep_nesting_is_refused_before_recursion(tmp_path: Path) -> None:
    path = _with_input_lines(
        tmp_path, ["          examples: " + "[" * 50_000 + "]" * 50_000 + "\n"]
    )
    message = _refused(path)
    assert message.startswith(f"{path}:")
    assert message.endswith(f"nested more than {MAX_MANIFEST_DEPTH} levels deep")
    _cli_refuses(path, f"nested more than {MAX_MANIFEST_DEPTH} levels deep")


def test_deep_nesting_as_large_as_the_size_cap_is_refused_early(tmp_path: Path) -> None:
    # refused as the scanner meets the 65th bracket, not after it has read ahead through the rest
    path = tmp_path / "brackets.yaml"
    path.write_text("x: " + "[" * (MAX_MANIFEST_BYTES - 10), encoding="utf-8")
    assert _refused(path) == f"{path}:1:68: nested more than {MAX_MANIFEST_DEPTH} levels deep"


def test_nesting_at_the_depth_cap_is_read_and_one_more_level_is_not() -> None:
    deepest = "[" * MAX_MANIFEST_DEPTH + "]" * MAX_MANIFEST_DEPTH
    value = parse_yaml(deepest)
    for _ in range(MAX_MANIFEST_DEPTH - 1):
        [value] = value
    assert value == []
    with pytest.raises(Exception, match=f"nested more than {MAX_MANIFEST_DEPTH} levels deep"):
        parse_yaml("[" + deepest + "]")


def test_block_style_nesting_is_capped_too(tmp_path: Path) -> None:
    lines = [f"{'  ' * level}k:\n" for level in range(MAX_MANIFEST_DEPTH + 5)]
    path = tmp_path / "block.yaml"
    path.write_text("".join(lines), encoding="utf-8")
    assert f"nested more than {MAX_MANIFEST_DEPTH} levels deep" in _refused(path)


@pytest.mark.parametrize(
    "number",
    ["1" + "0" * 5_000, "1" + ":1" * 5_000, "0x" + "f" * 5_000, "1." + "5" * 5_000],
    ids=["decimal", "sexagesimal", "hex", "float"],
)
def test_huge_numbers_are_refused(tmp_path: Path, number: str) -> None:
    path = _with_input_lines(tmp_path, [f"          maxProperties: {number}\n"])
    message = _refused(path)
    assert f"a number of {len(number)} characters refused" in message
    assert message.startswith(f"{path}:")


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "manifest.yaml"
    os.mkfifo(fifo)
    assert _refused(fifo) == (
        f"cannot read manifest file {str(fifo)!r}: it is a FIFO, not a regular file"
    )
    _cli_refuses(fifo, "it is a FIFO, not a regular file")


def test_dev_zero_is_refused() -> None:
    assert _refused("/dev/zero") == (
        "cannot read manifest file '/dev/zero': it is a character device, not a regular file"
    )
    _cli_refuses("/dev/zero", "it is a character device")


def test_folder_is_refused(tmp_path: Path) -> None:
    assert _refused(tmp_path) == (
        f"cannot read manifest file {str(tmp_path)!r}: it is a folder, not a regular file"
    )
    _cli_refuses(tmp_path, "it is a folder")


def test_file_over_the_size_cap_is_refused_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    size = 2 * MAX_MANIFEST_BYTES
    with big.open("wb") as stream:  # sparse: the size is what stat reports, nothing is written
        stream.truncate(size)
    message = _refused(big)
    assert message == (
        f"manifest file {str(big)!r}: {size} bytes, over the manifest size limit of "
        f"{MAX_MANIFEST_BYTES} bytes"
    )
    _cli_refuses(big, "over the manifest size limit")


def test_text_over_the_size_cap_is_refused_before_parsing() -> None:
    from ket.manifest import load_manifest

    with pytest.raises(ManifestError, match="over the manifest size limit"):
        load_manifest("#" * (MAX_MANIFEST_BYTES + 1), origin="big.yaml")


def test_symlink_to_a_device_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "manifest.yaml"
    link.symlink_to("/dev/zero")
    assert "it is a character device" in _refused(link)


def test_path_through_a_file_and_a_nul_in_the_path_are_refused(tmp_path: Path) -> None:
    under_file = COMMITTED / "x.yaml"
    assert _refused(under_file) == (
        f"cannot read manifest file {str(under_file)!r}: Not a directory"
    )
    assert "embedded null byte" in _refused(f"{tmp_path}/a\x00b.yaml")


def test_bytes_that_are_not_utf8_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"format: 1\ndeployment: caf\xe9\n")
    assert _refused(path) == (
        f"cannot read manifest file {str(path)!r}: not UTF-8 (byte 0xe9 at offset 25: "
        "invalid continuation byte)"
    )


def _chain(count: int, uses: int) -> dict[str, object]:
    """An input whose $defs D0..Dn each use the next `uses` times: uses ** n nodes inlined."""
    defs: dict[str, object] = {f"D{count}": {"type": "string"}}
    for i in range(count):
        refs = {f"f{k}": {"$ref": f"#/$defs/D{i + 1}"} for k in range(uses)}
        defs[f"D{i}"] = {"type": "object", "properties": refs, "description": "x" * 120}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/D0"}}, "$defs": defs}


def _with_input(tmp_path: Path, schemas: dict[str, dict[str, object]]) -> Path:
    """The committed manifest with functions app.f_<name> taking these input schemas."""
    data = yaml.safe_load(COMMITTED.read_text(encoding="utf-8"))
    data["modules"]["app"] = {
        "models": {},
        "jobs": {},
        "functions": {
            f"f_{name}": {
                "handler": "app:f",
                "input": schema,
                "effects": [],
                "cross_company": False,
            }
            for name, schema in schemas.items()
        },
    }
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "schemas.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_schema_whose_refs_inline_exponentially_is_refused(tmp_path: Path) -> None:
    # the reported attack: an 8.5 KB schema that made `ket diff` run out of memory
    path = _with_input(tmp_path, {"bomb": _chain(24, uses=2)})
    assert 8_000 < path.stat().st_size - COMMITTED.stat().st_size < 9_500
    message = _refused(path)
    assert message == (
        f"{path}: invalid manifest at modules.app.functions.f_bomb.input: the schema grows past "
        f"{MAX_INLINED_NODES} nodes once its $refs are inlined; a manifest's schemas are far "
        "smaller"
    )
    _cli_refuses(path, "the schema grows past")


def test_schema_whose_refs_inline_too_deep_is_refused(tmp_path: Path) -> None:
    path = _with_input(tmp_path, {"deep": _chain(60, uses=1)})
    assert _refused(path) == (
        f"{path}: invalid manifest at modules.app.functions.f_deep.input: the schema nests past "
        f"{MAX_INLINED_DEPTH} levels once its $refs are inlined"
    )


def test_schemas_under_the_cap_each_but_too_large_in_all_are_refused(tmp_path: Path) -> None:
    # 4,094 nodes inlined each: under the cap of one schema
    count = MAX_INLINED_TOTAL // 4_000
    path = _with_input(tmp_path, {f"{i:02}": _chain(9, uses=2) for i in range(count)})
    message = _refused(path)
    assert message.startswith(
        f"{path}: the input and output schemas grow past {MAX_INLINED_TOTAL} nodes in all once "
        "their $refs "
        "are inlined (at modules.app.functions.f_"
    )


def test_schema_at_the_depth_cap_is_compared(tmp_path: Path) -> None:
    # just under the caps, `ket diff` still compares the schemas
    old = _with_input(tmp_path / "old", {"deep": _chain(48, uses=1), "wide": _chain(9, uses=2)})
    changed = _chain(48, uses=1)
    changed["$defs"]["D48"] = {"type": "integer"}  # type: ignore[index]
    new = _with_input(tmp_path / "new", {"deep": changed, "wide": _chain(9, uses=2)})
    result = run_ket("diff", str(old), str(new))
    assert result.code == 0, result.err
    assert "review    function app.f_deep: input field 'x' changes type at properties.f0" in (
        result.out
    )


@pytest.mark.parametrize(
    ("line", "where"),
    [
        ("          required: 5\n", "input.required: must be a list of field names"),
        ("          anyOf: {a: 1}\n", "input.anyOf: must be a list of schemas"),
        ("          items: [1, 2]\n", "input.items: a schema must be a mapping, got list"),
        ("          $defs: {A: 5}\n", "input.$defs.A: a schema must be a mapping, got int"),
        (
            "          patternProperties: {x: {type: [[object]]}}\n",
            "input.patternProperties.x.type: must be a type name or a list of them",
        ),
    ],
)
def test_schema_shapes_diff_cannot_walk_are_refused(tmp_path: Path, line: str, where: str) -> None:
    path = _with_input_lines(tmp_path, [line])
    message = _refused(path)
    assert message == f"{path}: invalid manifest at modules.hotel.jobs.catch_up.{where}"


def test_the_committed_manifest_still_reads(tmp_path: Path) -> None:
    # the guards leave a canonical manifest alone, and `ket diff` of it against itself is empty
    read: Callable[[Path], object] = read_manifest
    assert read(COMMITTED) == read(COMMITTED)
    result = run_ket("diff", str(COMMITTED), str(COMMITTED))
    assert (result.code, result.out) == (0, "no changes\n")


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("          maxProperties: 0b_\n", "cannot read '0b_': invalid literal for int()"),
        ("          maxLength: 2024-02-31\n", "cannot read '2024-02-31': day is out of range"),
    ],
)
def test_scalars_that_look_typed_but_are_not_are_refused(
    tmp_path: Path, line: str, reason: str
) -> None:
    path = _with_input_lines(tmp_path, [line])
    message = _refused(path)
    assert message.startswith(f"{path}:")
    assert reason in message


@pytest.mark.parametrize(
    ("line", "where"),
    [
        ("          examples: [{1: a}]\n", "input.examples[0]: a key must be a string, got 1"),
        ("          default: 2024-02-03\n", "input.default: a value must be JSON, got date"),
        ("          const: !!binary aGk=\n", "input.const: a value must be JSON, got bytes"),
        ("          const: !!set {a}\n", "input.const: a value must be JSON, got set"),
    ],
)
def test_schema_values_that_are_not_json_are_refused(tmp_path: Path, line: str, where: str) -> None:
    path = _with_input_lines(tmp_path, [line])
    message = _refused(path)
    assert message == f"{path}: invalid manifest at modules.hotel.jobs.catch_up.{where}"


def test_a_repeated_key_is_refused(tmp_path: Path) -> None:
    # YAML would keep the second `type`, while a reviewer reads the first
    path = _with_input_lines(tmp_path, ["          type: string\n"])
    message = _refused(path)
    assert message.startswith(f"{path}:")
    assert message.endswith("key 'type' repeated: a manifest never repeats a key")
