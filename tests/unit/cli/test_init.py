"""`ket init`'s pyproject.toml: a new one, or `[tool.ket]` added to the user's, never clobbered."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ket.cli.init import project_files, pyproject_text
from ket.errors import KetError


def test_a_new_pyproject_names_the_project_after_its_folder(tmp_path: Path) -> None:
    root = tmp_path / "My Shop"
    settings = tomllib.loads(pyproject_text(root / "pyproject.toml", root, "web"))
    assert settings["project"]["name"] == "my-shop"
    assert settings["tool"]["ket"] == {"workspace": "workspace.py", "deployment": "web"}


def test_a_pyproject_without_a_final_newline_keeps_its_text(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text("[tool.black]\nline-length = 90", encoding="utf-8")
    text = pyproject_text(path, tmp_path, "app")
    assert text.startswith("[tool.black]\nline-length = 90\n")
    assert tomllib.loads(text)["tool"] == {
        "black": {"line-length": 90},
        "ket": {"workspace": "workspace.py", "deployment": "app"},
    }


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[project\nname = 1\n", "cannot be read as TOML"),
        ('tool = "not a table"\n', "[tool.ket] cannot be added to it"),
        ("[tool]\nket = {}\n", "has a [tool.ket] table already"),
    ],
)
def test_a_pyproject_ket_init_cannot_extend_is_refused(
    tmp_path: Path, text: str, error: str
) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(KetError, match=error.replace("[", r"\[").replace("]", r"\]")):
        pyproject_text(path, tmp_path, "app")


def test_the_module_files_carry_the_names_and_zone_given() -> None:
    files = project_files("shop", "web", "Asia/Tokyo")
    assert set(files) == {
        "workspace.py",
        "modules/__init__.py",
        "modules/shop/__init__.py",
        "modules/shop/handlers.py",
    }
    assert 'web = define_deployment(\n    name="web"' in files["workspace.py"]
    assert '"timezone": "Asia/Tokyo"' in files["modules/shop/__init__.py"]
    for text in files.values():
        compile(text, "generated", "exec")
