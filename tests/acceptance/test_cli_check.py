"""`ket check` as CI runs it: findings with codes and lines, exit codes, JSON, fail level."""

from __future__ import annotations

import json

from .conftest import Project, run_ket

BROKEN = """
from ket import define_deployment, define_job, define_module

def ping(ctx, input):
    return None

app = define_module(
    name="app",
    jobs={
        "ping": define_job(handler=ping),
        "tick": define_job(idempotent=True, schedule={"daily_at": "03:00"}, handler=ping),
        "mail": define_job(idempotent=True, queue="mail", effects=["read:app.Nope"], handler=ping),
    },
)
main = define_deployment(name="main", modules=[app])
"""


def test_findings_have_code_level_file_line_and_hint(project: Project) -> None:
    root = project({"app/workspace.py": BROKEN})
    result = run_ket("check", cwd=root)
    assert result.code == 1
    lines = result.out.splitlines()
    assert lines[0] == (
        "app/workspace.py:10: KET101 error: job app.ping: job is not declared idempotent; "
        "delivery is at least once"
    )
    assert lines[1].startswith("    hint: Delivery is at least once")
    assert "app/workspace.py:11: KET205 error: job app.tick:" in result.out
    assert "app/workspace.py:12: KET401 error: job app.mail: queue 'mail'" in result.out
    assert "app/workspace.py:12: KET302 error: job app.mail: effect 'read:app.Nope'" in result.out
    assert result.out.rstrip().endswith("4 errors")


def test_ket_timezone_supplies_the_zone_of_wall_clock_schedules(project: Project) -> None:
    root = project({"app/workspace.py": BROKEN})
    result = run_ket("check", cwd=root, env={"KET_TIMEZONE": "Europe/Oslo"})
    assert "KET205" not in result.out
    bad_zone = run_ket("check", cwd=root, env={"KET_TIMEZONE": "Mars/Olympus"})
    assert "KET204" in bad_zone.out
    assert "Mars/Olympus" in bad_zone.out


def test_json_format_lists_every_finding(project: Project) -> None:
    root = project({"app/workspace.py": BROKEN})
    result = run_ket("check", "--format", "json", cwd=root)
    assert result.code == 1
    document = json.loads(result.out)
    assert document["ok"] is False
    assert document["deployment"] == "main"
    assert [m["id"] for m in document["messages"]] == ["KET101", "KET205", "KET302", "KET401"]
    first = document["messages"][0]
    assert first["file"] == "app/workspace.py"
    assert first["line"] == 10
    assert first["level"] == "error"
    assert first["object"] == "job app.ping"


def test_fail_level_decides_whether_warnings_fail(project: Project) -> None:
    source = """
    from ket import define_deployment, define_job, define_module

    def ping(ctx, input):
        return None

    app = define_module(name="app", models={}, jobs={
        "ping": define_job(idempotent=True, effects=["storage:read", "storage:read"], handler=ping),
    })
    main = define_deployment(name="main", modules=[app])
    """
    root = project({"app/workspace.py": source})
    default = run_ket("check", cwd=root)
    assert default.code == 0
    assert "KET303 warning" in default.out
    strict = run_ket("check", "--fail-level", "warning", cwd=root)
    assert strict.code == 1


def test_tag_runs_only_that_topic(project: Project) -> None:
    root = project({"app/workspace.py": BROKEN})
    result = run_ket("check", "--tag", "schedules", cwd=root)
    assert result.code == 1
    assert "KET205" in result.out
    assert "KET101" not in result.out
    assert "KET401" not in result.out


def test_clean_example_app_passes() -> None:
    result = run_ket("check")
    assert result.code == 0, result.err
    assert result.out.endswith("no issues\n")
