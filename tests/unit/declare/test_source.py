"""SourceLocation: the file and line of a define_* call, rendered relative when inside cwd."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ket.declare import SourceLocation
from ket.declare.source import UNKNOWN, caller

from .location import marked


def where_am_i_called() -> SourceLocation:
    return caller()


def test_caller_is_the_line_that_called_the_function() -> None:
    location = where_am_i_called()  # caller-line
    assert location == marked("caller-line", __file__)


def test_render_is_relative_inside_the_base(tmp_path: Path) -> None:
    location = SourceLocation(file=str(tmp_path / "app" / "workspace.py"), line=9)
    assert location.render(relative_to=str(tmp_path)) == f"{os.path.join('app', 'workspace.py')}:9"


def test_render_keeps_the_path_outside_the_base(tmp_path: Path) -> None:
    outside = str(tmp_path.parent / "elsewhere.py")
    location = SourceLocation(file=outside, line=3)
    assert location.render(relative_to=str(tmp_path)) == f"{outside}:3"


def test_render_defaults_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    location = SourceLocation(file=str(tmp_path / "mod.py"), line=1)
    assert location.render() == "mod.py:1"


def test_unknown_location_renders_as_unknown() -> None:
    assert UNKNOWN.render() == "<unknown>:0"
