"""The example app's hotel module: schedules in a named timezone, fanned out per company."""

from __future__ import annotations

from datetime import UTC, datetime

from modules_example.workspace import erp

from ket.testing import create_test_deployment


def test_night_audit_runs_at_three_in_ho_chi_minh_and_closes_each_company_day() -> None:
    with create_test_deployment(erp) as e2e:
        for code in ("north", "south"):
            e2e.db.insert("company.Company", {"name": code.title(), "code": code})
        e2e.clock.set(datetime(2030, 1, 15, 19, 30, tzinfo=UTC))  # 02:30 in Ho Chi Minh City
        assert e2e.run_schedules() == 0  # first sighting: installs, never fires at once
        e2e.clock.set(datetime(2030, 1, 15, 20, 0, 1, tzinfo=UTC))  # 03:00:01 local
        assert e2e.run_schedules() == 2  # night_audit, and catch_up (every 15m) too
        fired = {job.name for job in e2e.jobs()}
        assert "hotel.night_audit" in fired
        e2e.drain_jobs()
        closes = e2e.jobs(name="hotel.close_day")
        assert sorted(job.company or "" for job in closes) == sorted(
            row["id"] for row in e2e.db.select("company.Company")
        )
        assert {job.state for job in closes} == {"completed"}
        assert len(e2e.db.select("hotel.DayClose")) == 2
        [catch_up] = e2e.jobs(name="hotel.catch_up")
        assert (catch_up.state, catch_up.errors) == ("completed", ())
        [audit] = e2e.jobs(name="hotel.night_audit")
        assert audit.tick == datetime(2030, 1, 15, 20, 0, tzinfo=UTC)


def test_downtime_gives_one_run_that_knows_how_many_ticks_it_skipped() -> None:
    with create_test_deployment(erp) as e2e:
        e2e.clock.set(datetime(2030, 1, 15, 21, 0, tzinfo=UTC))
        e2e.run_schedules()  # install
        e2e.clock.set(datetime(2030, 1, 18, 21, 0, tzinfo=UTC))  # three days later
        e2e.run_schedules()
        [audit] = e2e.jobs(name="hotel.night_audit")
        assert (audit.tick, audit.ticks_skipped) == (datetime(2030, 1, 18, 20, 0, tzinfo=UTC), 2)
        [catch_up] = e2e.jobs(name="hotel.catch_up")
        assert catch_up.ticks_skipped == 3 * 24 * 4 - 1
