"""Data flows one way between the rooms of the package (STYLE.md): a test keeps it so."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "framework" / "ket"

# a leaf room imports no other room of the package
LEAF = {
    "declare",
    "manifest",
    "check",
    "diff",
    "cli",
    "workspace",
    "catalog",
    "runtime",
    "context",
    "store",
    "tck",
    "schedule",
    "transport",
    "operate",
    "storage",
}

# room -> rooms it must never import
FORBIDDEN = {
    "schedule": {"declare", "manifest", "check", "diff", "cli", "workspace"},
    "declare": {"manifest", "check", "diff", "cli", "workspace"},
    "check": {"manifest", "diff", "cli", "workspace"},
    "manifest": {"diff", "cli", "workspace"},
    "diff": {"check", "declare", "cli", "workspace", "schedule"},
    "errors": {"declare", "manifest", "diff", "cli", "workspace", "schedule"},
    "store": {
        "declare",
        "manifest",
        "check",
        "diff",
        "cli",
        "workspace",
        "catalog",
        "runtime",
        "context",
        "tck",
        "schedule",
        "observe",
    },
    "tck": {
        "declare",
        "manifest",
        "check",
        "diff",
        "cli",
        "workspace",
        "catalog",
        "runtime",
        "context",
        "schedule",
    },
    "catalog": {"manifest", "diff", "cli", "workspace", "runtime", "context", "observe"},
    "context": {"manifest", "check", "diff", "cli", "workspace", "runtime", "tck", "observe"},
    # the runtime is watched through its hooks and job stats; it never knows who watches
    "runtime": {"manifest", "check", "diff", "cli", "workspace", "tck", "serve", "observe"},
    # logs and metrics read the runtime's events and the store's stats, never the other way
    # (`ket serve` may mount them: the server may import observe, not observe the server)
    "observe": {
        "manifest",
        "check",
        "diff",
        "cli",
        "workspace",
        "tck",
        "context",
        "declare",
        "serve",
    },
    # what operators do (retry, cancel, the audit log, schedules), for the CLI and the server
    "operate": {
        "manifest",
        "check",
        "diff",
        "cli",
        "workspace",
        "tck",
        "serve",
        "testing",
        "runtime",
    },
    # the server stands on the runtime and the store contract; the CLI passes it a store opener
    "serve": {"manifest", "check", "diff", "cli", "workspace", "tck", "testing"},
    # private folders (storage, the outbox): os calls only, so both rooms can use them
    "folder": LEAF,
    # secret input fields: pure functions over pydantic values and payloads, used by the
    # catalog, the runtime, the client and the CLI
    "secret": LEAF,
    # senders know messages, not jobs: the context checks effects and keys before them
    "transport": {
        "declare",
        "manifest",
        "check",
        "diff",
        "cli",
        "workspace",
        "catalog",
        "runtime",
        "context",
        "tck",
        "schedule",
    },
    # blob backends know tenants, keys and bytes: the context checks effects before them
    "storage": {
        "declare",
        "manifest",
        "check",
        "diff",
        "cli",
        "workspace",
        "catalog",
        "runtime",
        "context",
        "store",
        "tck",
        "schedule",
        "transport",
        "serve",
        "testing",
    },
}
# rooms that may use the store contract but never a concrete store
CONTRACT_ONLY = ["catalog", "context", "runtime", "tck", "serve", "operate", "observe"]


def _modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return {name for name in found if name.startswith("ket.")}


def _imports(path: Path) -> set[str]:
    return {name.split(".")[1] for name in _modules(path)}


def _files(room: str) -> list[Path]:
    files = [PACKAGE / f"{room}.py"] if (PACKAGE / f"{room}.py").exists() else []
    return files + (sorted((PACKAGE / room).rglob("*.py")) if (PACKAGE / room).is_dir() else [])


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_room_does_not_import_rooms_downstream_of_it(room: str) -> None:
    files = _files(room)
    assert files, f"room {room} not found"
    offenders = {
        f"{path.relative_to(PACKAGE)} imports ket.{target}"
        for path in files
        for target in _imports(path) & FORBIDDEN[room]
    }
    assert offenders == set()


def test_only_the_cli_imports_the_server() -> None:
    # `ket.serve` needs Starlette: no room a worker or a declaration loads may import it
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] not in ("cli", "serve") and "serve" in _imports(path)
    ]
    assert offenders == []


def test_nothing_imports_the_cli() -> None:
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "cli" not in path.relative_to(PACKAGE).parts and "cli" in _imports(path)
    ]
    assert offenders == []


@pytest.mark.parametrize("room", CONTRACT_ONLY)
def test_room_depends_on_the_store_contract_never_on_a_concrete_store(room: str) -> None:
    offenders = {
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in _files(room)
        for name in _modules(path)
        if name in ("ket.store.sql", "ket.store.memory")
        or name.startswith(("ket.store.sql.", "ket.store.memory."))
    }
    assert offenders == set()


def test_declaring_and_the_cli_start_without_the_sql_store() -> None:
    # SQLAlchemy's engines and asyncio extension are most of ket's start-up time and memory:
    # `import ket`, `ket check`, `ket manifest` and `ket diff` must not pay for them.
    probe = (
        "import sys, ket, ket.cli.main; from ket import define_job; "
        "print(sorted(m for m in sys.modules "
        "if m.startswith(('ket.store.sql', 'ket.client', 'sqlalchemy.ext', 'sqlalchemy.orm'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def _loaded(code: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules starting with `prefixes` that a fresh interpreter has loaded after `code`."""
    probe = (
        f"import sys\n{code}\nprint(sorted(m for m in sys.modules if m.startswith({prefixes!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=PACKAGE.parents[1],
    )
    return list(ast.literal_eval(done.stdout.strip().splitlines()[-1]))


STORES = ("ket.store.sql", "ket.store.memory", "ket.runtime", "ket.client", "sqlalchemy", "psycopg")


def test_import_ket_loads_no_store() -> None:
    assert _loaded("import ket", ("ket.store", *STORES)) == []


def test_ket_check_loads_no_store_and_no_other_command() -> None:
    code = (
        "from ket.cli.main import main\n"
        "assert main(['check', '--workspace', 'modules_example/workspace.py']) == 0"
    )
    assert _loaded(code, (*STORES, "ket.manifest", "ket.cli.worker", "ket.cli.jobs")) == []


def test_a_worker_without_metrics_imports_no_prometheus_client() -> None:
    # metrics are the optional `metrics` extra, and cost a worker that did not ask nothing
    code = "import ket.cli.worker, ket.cli.dev, ket.observe.logs"
    assert _loaded(code, ("prometheus_client", "ket.observe.metrics", "ket.observe.gauges")) == []


def test_the_worker_and_the_store_on_postgresql_import_no_sqlalchemy() -> None:
    # SQLAlchemy is imported where the engine is made, on first use (ket.store.sql.store)
    code = (
        "import ket.cli.worker, ket.store.sql.store, ket.store.sql.lane, ket.store.sql.listener\n"
        "import ket.store.sql.registry_reader"
    )
    assert _loaded(code, ("sqlalchemy", "ket.manifest", "ket.store.sql.registry")) == [
        "ket.store.sql.registry_reader"
    ]


def test_the_worker_loads_no_s3_client_unless_storage_is_on_s3() -> None:
    # obstore (a native library) costs start-up time and memory only to those who use it
    code = "import ket.cli.worker, ket.cli.dev, ket.cli.call, ket.cli.serve, ket.testing"
    assert _loaded(code, ("obstore", "ket.storage.s3", "boto3")) == []
