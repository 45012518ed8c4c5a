"""Property: whatever the command line, `ket` answers with a message and a documented exit code.

Hypothesis builds argument vectors for every command from its own options and hostile values
(random text, control characters, odd Unicode, numbers far past 64 bits, JSON fragments, odd
files), runs the CLI's entry point in-process in a project of its own, and checks that stderr
holds no traceback, the exit code is 0, 1 or 2, nothing reports itself as unexpected (a bug),
and that an exit 2 names the offending value (or the missing argument).

Arguments the operating system cannot pass (a NUL) are left out. Paths that would write are
drawn only from the test's own folders: random text never reaches `-o` or a `sqlite:///` URL.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from ket.cli.main import main
from ket.cli.output import escape
from tests.acceptance.conftest import REPO
from tests.hostile.project import write_project

APP = """
from ket import define_deployment, define_function, define_job, define_module

async def echo(ctx, input):
    return {"value": input.value}

async def ping(ctx, input):
    pass

app = define_module(
    name="app",
    functions={"echo": define_function(input={"value": "json"}, handler=echo)},
    jobs={"ping": define_job(idempotent=True, input={"n": "int"}, handler=ping)},
)
main = define_deployment(name="main", modules=[app])
"""
# On a failure, Hypothesis's pytest plugin imports libcst to suggest a patch, which warns.
pytestmark = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
)
EXAMPLES = 100
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    # no explain phase: tracing every line of the CLI would slow the shrinking of a failure
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
    derandomize=True,
)
BIG = [str(2**63), str(2**63 - 1), str(2**64), str(-(2**63)), "9" * 5_000, "-1", "0"]
ODD = [
    "",
    " ",
    "-",
    "--",
    "\x1b[2J",
    "a\nb",
    "\r",
    "\u2028",
    "\u202e",
    "\udcff",
    "\ufeff",
    "\u0661\u0662",
    "1e9",
    "nan",
    "inf",
    "1_0",
    "\uff10",
    "x" * 3_000,
    "../..",
]
JSON = [
    "{}",
    "[]",
    "null",
    '{"value": 1}',
    '{"value": "\\u001b[2J"}',
    '{"value": ' + "[" * 99 + "]" * 99 + "}",
    "[" * 3_000,
    "{" * 3_000,
    '{"value": 1' + "0" * 5_000 + "}",
    '{"value": 1e999}',
    '{"value": NaN}',
    '{"value": "\\ud800"}',
    '{"a": ',
    '"string"',
]
URLS = [
    "postgresql://[::1",
    "postgresql://root@127.0.0.1:99999/x",
    "postgresql://root@127.0.0.1:1/x",
    "mysql://x/y",
    "sqlite://",
    "sqlite:///:memory:",
    "not a url",
    "smtp://u:p@[::1",
    "http://x:y@z:port/",
]


@dataclass(frozen=True)
class Place:
    """The folders a run may touch: the project, an empty folder, odd files."""

    project: Path
    empty: Path
    registry: Path
    fifo: Path
    folder: Path
    manifest: Path

    def files(self) -> list[str]:
        return [
            str(self.fifo),
            str(self.folder),
            str(self.manifest),
            str(self.project / "absent" / "x.yaml"),
            "/dev/zero",
            "/dev/null",
            str(self.project / "app" / "workspace.py"),
            str(REPO / "manifests" / "erp.yaml"),
        ]

    def outputs(self) -> list[str]:
        return [
            str(self.fifo),
            str(self.folder),
            str(self.project / "absent" / "x.yaml"),
            str(self.project / "out.yaml"),
            "/dev/null",
            "-",
        ]

    def databases(self) -> list[str]:
        return [
            f"sqlite:///{self.project / '.ket' / 'default.db'}",
            f"sqlite:///{self.folder}",
            f"sqlite:///{self.project / 'tenants' / '{tenant}.db'}",
        ]


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Place:
    root = tmp_path_factory.mktemp("property")
    (root / "project").mkdir()
    project = write_project(root / "project", APP)
    empty = root / "empty"
    empty.mkdir()
    registry = root / "registry"  # where `tenants add` may register tenants
    registry.mkdir()
    folder = root / "a folder"
    folder.mkdir()
    fifo = root / "fifo.yaml"
    os.mkfifo(fifo)
    manifest = root / "bomb.yaml"
    manifest.write_text("format: 1\na: &a [1, 1]\nb: [*a, *a]\n", encoding="utf-8")
    with _inside(project, empty):
        assert main(["migrate"]) == 0
    return Place(
        project=project,
        empty=empty,
        registry=registry,
        fifo=fifo,
        folder=folder,
        manifest=manifest,
    )


@contextlib.contextmanager
def _inside(cwd: Path, state: Path) -> Iterator[None]:
    env = {
        "KET_REGISTRY_URL": f"sqlite:///{state / 'registry.db'}",
        "KET_TRANSPORT_URL": f"dev:{state / 'outbox'}",
    }
    cleared = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    with mock.patch.dict(os.environ, {**cleared, **env}, clear=True), contextlib.chdir(cwd):
        yield


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


def run(argv: Sequence[str], cwd: Path, state: Path) -> Run:
    out, err = io.StringIO(), io.StringIO()
    with (
        _inside(cwd, state),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = main(list(argv))
    event(f"exit {code}")  # the spread of outcomes, in --hypothesis-show-statistics
    return Run(code, out.getvalue(), err.getvalue())


def text() -> st.SearchStrategy[str]:
    """Anything an argument can be: random text (no NUL), odd values, numbers, JSON."""
    return st.one_of(
        st.text(st.characters(exclude_characters="\x00"), max_size=20),
        st.sampled_from(ODD + BIG + JSON),
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
    )


def options(flags: dict[str, st.SearchStrategy[str]]) -> st.SearchStrategy[list[str]]:
    """Some of `flags`, each with a value from its strategy, in any order."""
    pairs = [st.tuples(st.just(flag), values) for flag, values in flags.items()]
    chosen = st.lists(st.one_of(pairs), max_size=3) if pairs else st.just([])
    return chosen.map(lambda items: [part for pair in items for part in pair])


def argv_for(
    command: Sequence[str],
    flags: dict[str, st.SearchStrategy[str]],
    positionals: Sequence[st.SearchStrategy[str]],
) -> st.SearchStrategy[list[str]]:
    """`command`, then options and positionals (each present or not), and maybe a stray."""
    return st.tuples(
        options(flags),
        st.tuples(*[st.one_of(st.just(None), p) for p in positionals]),
        st.lists(text(), max_size=1),
    ).map(
        lambda parts: [
            *command,
            *parts[0],
            *[p for p in parts[1] if p is not None],
            *parts[2],
        ]
    )


def named(value: str, err: str) -> bool:
    """Whether `err` names `value`: escaped, quoted, or by its start when it is long."""
    forms = [escape(value), escape(repr(value))[1:-1], repr(value)]
    return any(form[:30] in err for form in forms if form) or (value == "" and "''" in err)


def check(result: Run, argv: Sequence[str]) -> None:
    """No traceback, a documented exit code, and an exit 2 that is an error message."""
    assert "Traceback" not in result.err, (argv, result.err)
    assert "unexpected" not in result.err, (argv, result.err)
    assert result.code in (0, 1, 2), (argv, result)
    if result.code == 2:
        *_, last = result.err.splitlines() or [""]
        assert last.startswith("ket") and ": error: " in last, (argv, result.err)


def check_named(
    result: Run, argv: Sequence[str], value: str, other: str | tuple[str, ...] | None
) -> None:
    """As `check`, and an exit 2 names `value`, the one hostile argument of `argv` (or says
    `other`, messages that name a part of it, such as a field of a JSON input, or name it by
    its role where it is never printed back: a call's input, which may hold a secret)."""
    check(result, argv)
    if result.code == 2:
        others = (other,) if isinstance(other, str) else other or ()
        said = any(message in result.err for message in others)
        assert said or named(value, result.err), (argv, result.err)


def _workspace_flags(place: Place) -> dict[str, st.SearchStrategy[str]]:
    return {
        "--workspace": st.one_of(text(), st.sampled_from([*place.files(), "os", "x.y.z"])),
        "--deployment": text(),
    }


def _database_flags(place: Place) -> dict[str, st.SearchStrategy[str]]:
    return {
        "--database-url": st.one_of(text(), st.sampled_from(URLS + place.databases())),
        "--tenant": text(),
    }


def _choice(*values: str) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(values), text())


@SETTINGS
@given(data=st.data())
def test_declaring_commands(place: Place, data: st.DataObject) -> None:
    workspace = _workspace_flags(place)
    command = data.draw(st.sampled_from(["manifest", "check", "diff"]))
    strategies = {
        "manifest": argv_for(
            ["manifest"],
            {**workspace, "-o": st.sampled_from(place.outputs())},
            [],
        ),
        "check": argv_for(
            ["check"],
            {
                **workspace,
                "--format": _choice("text", "json"),
                "--fail-level": _choice("error", "warning"),
                "--tag": _choice("effects", "schedules"),
            },
            [],
        ),
        "diff": argv_for(
            ["diff"],
            {**workspace, "--format": _choice("text", "json")},
            [st.one_of(st.sampled_from(place.files()), text())] * 2,
        ),
    }
    argv = data.draw(strategies[command])
    check(run(argv, place.project, place.empty), argv)


@SETTINGS
@given(data=st.data())
def test_call(place: Place, data: st.DataObject) -> None:
    argv = data.draw(
        argv_for(
            ["call"],
            {**_workspace_flags(place), **_database_flags(place)},
            [_choice("app.echo", "app.ping", "app", ".", "app.echo.x"), text()],
        )
    )
    check(run(argv, place.project, place.empty), argv)


@SETTINGS
@given(data=st.data())
def test_running_commands_outside_a_project(place: Place, data: st.DataObject) -> None:
    # without a workspace, worker and dev stop at their input instead of serving for ever
    command = data.draw(st.sampled_from(["worker", "dev", "migrate"]))
    flags = {**_workspace_flags(place), **_database_flags(place)}
    flags.pop("--workspace")
    if command != "migrate":
        flags["--log-level"] = _choice("DEBUG", "INFO")
        flags["--concurrency"] = _choice(
            "default=5", "default=0", "a=1,a=2", "default=1,", "default=" + "9" * 5_000
        )
        flags["--queues"] = _choice("mail", "", "default,", "mail=1", "a" * 5_000)
    argv = data.draw(argv_for([command], flags, []))
    result = run(argv, place.empty, place.empty)
    check(result, argv)
    assert result.code != 0 or result.out.startswith("usage:"), argv


@SETTINGS
@given(data=st.data())
def test_migrate_and_tenants(place: Place, data: st.DataObject) -> None:
    database = _database_flags(place)
    strategies = [
        argv_for(["migrate"], {**_workspace_flags(place), **database}, []),
        argv_for(
            ["tenants", "add"],
            {**database, "--tenant-database-url": st.sampled_from(URLS)},
            [text()],
        ),
        argv_for(["tenants", "list"], {"--format": _choice("text", "json")}, []),
        argv_for(["tenants", "remove"], {}, [text()]),
    ]
    argv = data.draw(st.one_of(strategies))
    # a registry of its own: the tenants added here must not change the other tests' app
    check(run(argv, place.project, place.registry), argv)


@SETTINGS
@given(data=st.data())
def test_jobs(place: Place, data: st.DataObject) -> None:
    database = _database_flags(place)
    number = st.one_of(st.sampled_from([*BIG, "1", "7"]), text())
    listing = {
        "--state": _choice("available", "completed"),
        "--queue": text(),
        "--job": text(),
        "--limit": number,
        "--offset": number,
        "--format": _choice("text", "json"),
    }
    strategies = [
        argv_for(["jobs", "list"], {**database, **listing}, []),
        argv_for(["jobs", "show"], {**database, "--format": _choice("json")}, [number]),
        argv_for(["jobs", "retry"], database, [number]),
        argv_for(["jobs", "cancel"], database, [number]),
        argv_for(["jobs", "prune"], {**database, "--older-than": _choice("1d", "0s")}, []),
        argv_for(["jobs", "stats"], {**database, "--format": _choice("json")}, []),
    ]
    argv = data.draw(st.one_of(strategies))
    check(run(argv, place.project, place.empty), argv)


@SETTINGS
@given(argv=st.lists(text(), max_size=4))
def test_any_argv(place: Place, argv: list[str]) -> None:
    check(run(argv, place.empty, place.empty), argv)


# One hostile value in an otherwise valid command line: an exit 2 must name it.


def _slots(place: Place) -> list[tuple[list[str], int, str | tuple[str, ...] | None]]:
    """Valid command lines in the project, the index of the argument to replace, and other
    messages that name the part of the value at fault (or the value by its role)."""
    manifest = str(REPO / "manifests" / "erp.yaml")
    echo = '{"value": 1}'
    # a call's input is never printed back (it may hold a secret): its errors name what is
    # wrong with it, a position or a kind
    unread = (
        "ket: error: input is not valid JSON (",
        "ket: error: input must be a JSON object, got ",
        "ket: error: input is nested ",
    )
    lines: list[tuple[list[str], int, str | tuple[str, ...] | None]] = [
        (["jobs", "show", "1"], 2, None),
        (["jobs", "retry", "1"], 2, None),
        (["jobs", "cancel", "1"], 2, None),
        (["jobs", "list", "--limit", "5"], 3, None),
        (["jobs", "list", "--offset", "5"], 3, None),
        (["jobs", "list", "--state", "available"], 3, None),
        (["jobs", "list", "--queue", "default"], 3, None),
        (["jobs", "list", "--job", "app.ping"], 3, None),
        (["jobs", "prune", "--older-than", "1d"], 3, None),
        (["jobs", "stats", "--format", "json"], 3, None),
        (["call", "app.echo", echo], 1, None),
        (
            ["call", "app.echo", echo],
            2,
            ("invalid input for app.echo: value: Field required", *unread),
        ),
        (["check", "--tag", "effects"], 2, None),
        (["check", "--fail-level", "error"], 2, None),
        (["diff", manifest, manifest], 1, None),
        (["diff", manifest, manifest], 2, None),
        (["manifest", "--deployment", "main"], 2, None),
        (["check", "--workspace", "app/workspace.py"], 2, None),
        (["tenants", "remove", "acme"], 2, None),
        # a value that parses ends at the missing workspace: the worker never starts here
        (["worker", "--workspace", "gone.py", "--concurrency", "default=5"], 4, "gone.py"),
    ]
    return lines


@SETTINGS
@given(data=st.data())
def test_the_hostile_argument_is_named(place: Place, data: st.DataObject) -> None:
    argv, index, other = data.draw(st.sampled_from(_slots(place)))
    value = data.draw(text().filter(lambda v: not v.startswith("-")))
    argv = [*argv[:index], value, *argv[index + 1 :]]
    check_named(run(argv, place.project, place.empty), argv, value, other)
