"""`ket init`: a new project that passes `ket check` and runs under `ket dev`, as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import tomllib
from pathlib import Path
from typing import IO

import yaml

from tests.acceptance.conftest import run_ket

GREETED = "hello, Ada!"
SENT = "completed tenant=default job_id=1 name=hello.send_greetings"


def test_init_writes_a_project_that_checks_manifests_and_runs_under_dev(tmp_path: Path) -> None:
    root = tmp_path / "shop"  # not there yet: ket init makes it
    init = run_ket("init", str(root), cwd=tmp_path)
    assert init.code == 0, init.err
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py")) == [
        "modules/__init__.py",
        "modules/hello/__init__.py",
        "modules/hello/handlers.py",
        "workspace.py",
    ]
    check = run_ket("check", cwd=root)
    assert (check.code, check.out) == (
        0,
        "ket check: deployment 'app' (1 module, 1 job): no issues\n",
    )
    manifest = run_ket("manifest", cwd=root)
    assert manifest.code == 0, manifest.err
    job = yaml.safe_load(manifest.out)["modules"]["hello"]["jobs"]["send_greetings"]
    assert (job["schedule"]["daily_at"], job["schedule"]["timezone"]) == ("09:00", "UTC")

    code, log = _dev_until(root, SENT, "--call", "hello.greet", '{"name": "Ada"}')
    assert GREETED in log and SENT in log
    assert code == 0, log
    assert "worker stopped" in log


def test_init_names_the_module_deployment_and_zone_it_is_given(tmp_path: Path) -> None:
    init = run_ket(
        "init", "--module", "shop", "--deployment", "web", "--timezone", "Europe/Paris",
        cwd=tmp_path,
    )  # fmt: skip
    assert init.code == 0, init.err
    manifest = yaml.safe_load(run_ket("manifest", cwd=tmp_path).out)
    assert manifest["deployment"] == "web"
    assert manifest["modules"]["shop"]["jobs"]["send_greetings"]["schedule"]["timezone"] == (
        "Europe/Paris"
    )


def test_init_adds_tool_ket_to_an_existing_pyproject_and_keeps_its_text(tmp_path: Path) -> None:
    mine = '[project]\nname = "mine"\nversion = "2.0"\n\n[tool.ruff]\nline-length = 99\n'
    (tmp_path / "pyproject.toml").write_text(mine, encoding="utf-8")
    init = run_ket("init", cwd=tmp_path)
    assert init.code == 0, init.err
    text = (tmp_path / "pyproject.toml").read_text(encoding="utf-8")
    assert text.startswith(mine)
    settings = tomllib.loads(text)
    assert (settings["project"]["name"], settings["tool"]["ruff"]) == ("mine", {"line-length": 99})
    assert settings["tool"]["ket"] == {"workspace": "workspace.py", "deployment": "app"}
    assert run_ket("check", cwd=tmp_path).code == 0


def test_init_refuses_an_existing_file_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "workspace.py").write_text("# mine\n", encoding="utf-8")
    init = run_ket("init", cwd=tmp_path)
    assert init.code == 2
    assert init.err == (
        "ket: error: workspace.py exists already; ket init writes only new files "
        "(nothing was written)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["workspace.py"]
    assert (tmp_path / "workspace.py").read_text(encoding="utf-8") == "# mine\n"


def test_init_refuses_a_pyproject_that_configures_ket_already(tmp_path: Path) -> None:
    mine = '[tool.ket]\nworkspace = "app/workspace.py"\n'
    (tmp_path / "pyproject.toml").write_text(mine, encoding="utf-8")
    init = run_ket("init", cwd=tmp_path)
    assert (init.code, init.out) == (2, "")
    assert "pyproject.toml has a [tool.ket] table already" in init.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pyproject.toml"]
    assert (tmp_path / "pyproject.toml").read_text(encoding="utf-8") == mine


def test_init_refuses_a_bad_module_name_or_zone_naming_it(tmp_path: Path) -> None:
    bad_name = run_ket("init", "--module", "Shop-1", cwd=tmp_path)
    bad_zone = run_ket("init", "--timezone", "Mars/Olympus", cwd=tmp_path)
    assert (bad_name.code, bad_zone.code) == (2, 2)
    assert "--module must be a lowercase name" in bad_name.err and "'Shop-1'" in bad_name.err
    assert "--timezone must be an IANA zone" in bad_zone.err and "'Mars/Olympus'" in bad_zone.err
    assert list(tmp_path.iterdir()) == []


def _dev_until(root: Path, wanted: str, *args: str) -> tuple[int, str]:
    """Run `ket dev ARGS` until its log shows `wanted` (or 60 s pass), then Ctrl-C it; returns
    its exit status and log."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    dev = subprocess.Popen(
        [sys.executable, "-m", "ket.cli.main", "dev", *args],
        cwd=root,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert dev.stdout is not None
    seen: list[str] = []
    found = threading.Event()

    def read(out: IO[str]) -> None:
        for line in out:
            seen.append(line)
            if wanted in line:
                found.set()
        found.set()  # its output ended: it stopped on its own

    reader = threading.Thread(target=read, args=(dev.stdout,), daemon=True)
    reader.start()
    found.wait(timeout=60)  # a bound for a broken build, not a timing: the log decides
    if dev.poll() is None:
        dev.send_signal(signal.SIGINT)
    code = dev.wait(timeout=60)
    reader.join(timeout=10)
    dev.stdout.close()
    return code, "".join(seen)


def test_init_that_fails_midway_takes_back_what_it_wrote(tmp_path: Path) -> None:
    (tmp_path / "modules").write_text("a file where the modules folder would go\n")
    init = run_ket("init", cwd=tmp_path)
    assert (init.code, init.out) == (2, "")
    assert init.err == "ket: error: could not write modules: File exists\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["modules"]
