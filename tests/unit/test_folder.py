"""ket.folder: links below the root are refused wherever they stand; the root's own are followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ket import folder


def write(root: Path, parts: list[str], data: bytes) -> None:
    with folder.opened(root, parts[:-1], create=True) as where:
        assert where is not None
        folder.write(where, parts[-1], data, len(parts) - 1)


def read(root: Path, parts: list[str]) -> bytes | None:
    with folder.opened(root, parts[:-1], create=False) as where:
        return None if where is None else folder.read(where, parts[-1], len(parts) - 1)


def test_a_root_that_is_a_link_is_followed(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    (tmp_path / "root").symlink_to(disk)
    write(tmp_path / "root", ["acme", "a.txt"], b"blob")
    assert (disk / "acme" / "a.txt").read_bytes() == b"blob"
    assert read(tmp_path / "root", ["acme", "a.txt"]) == b"blob"


@pytest.mark.parametrize("dangling", [False, True])
def test_a_link_at_any_depth_is_refused_naming_its_depth(tmp_path: Path, dangling: bool) -> None:
    root, target = tmp_path / "root", tmp_path / ("nowhere" if dangling else "elsewhere")
    if not dangling:
        target.mkdir()
    write(root, ["acme", "a", "b.txt"], b"blob")
    (root / "acme" / "link").symlink_to(target)
    with pytest.raises(folder.Refused) as raised:
        write(root, ["acme", "link", "c", "d.txt"], b"planted")
    assert (raised.value.depth, raised.value.kind) == (1, "link")
    assert not target.exists() or list(target.iterdir()) == []


def test_a_missing_folder_reads_as_nothing_and_is_not_created(tmp_path: Path) -> None:
    assert read(tmp_path / "root", ["acme", "a", "b.txt"]) is None
    assert not (tmp_path / "root").exists()


def test_files_lists_regular_files_only(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write(root, ["acme", "a", "b.txt"], b"blob")
    write(root, ["acme", "c.txt"], b"blob")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_text("secret")
    (root / "acme" / "linked").symlink_to(elsewhere)
    (root / "acme" / "linked.txt").symlink_to(elsewhere / "secret.txt")
    (root / "acme" / f"{folder.TEMP_PREFIX}123").write_text("half a write")
    os.mkfifo(root / "acme" / "pipe")
    with folder.opened(root, ["acme"], create=False) as where:
        assert where is not None
        assert sorted(folder.files(where)) == ["a/b.txt", "c.txt"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    write(root, ["acme", "a.txt"], b"old")

    def broken_replace(*args: object, **kwargs: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr("ket.folder.os.replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        write(root, ["acme", "a.txt"], b"new")
    assert sorted(p.name for p in (root / "acme").iterdir()) == ["a.txt"]
    assert (root / "acme" / "a.txt").read_bytes() == b"old"
