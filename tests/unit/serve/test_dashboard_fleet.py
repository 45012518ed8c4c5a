"""The Fleet page: every tenant the server serves, a row each (jobs by state, oldest due job's
wait, jobs discarded in the last hour, live workers), the sickest first, for a principal holding
`fleet:read`; a tenant whose database cannot be read says why and does not hide the others."""

from __future__ import annotations

from pathlib import Path

from tests.unit.serve.conftest import Serve
from tests.unit.serve.desk import arrange, deployment, send_job

D = "/dashboard"
FRAN = {"Authorization": "Bearer fleet"}
THREE = {"acme": None, "globex": None, "initech": None}


def _rows(page: str) -> list[str]:
    """The tenants of the Fleet table, in the order shown."""
    body = page.split('<table class="fleet">', 1)[1].split("</table>", 1)[0]
    return [cell.split('/jobs">', 1)[1].split("<", 1)[0] for cell in body.split("<tr")[2:]]


def test_the_fleet_page_lists_every_tenant_the_sickest_first(serve: Serve, tmp_path: Path) -> None:
    acme, globex, _ = (f"sqlite:///{tmp_path}/{t}.db" for t in THREE)
    client = serve(deployment(), registered=dict(THREE))
    arrange(acme, [send_job(), send_job()], discard=2)  # two gave up just now
    arrange(globex, [send_job() for _ in range(5)])  # five waiting
    page = client.get(f"{D}/t/acme/fleet", headers=FRAN)
    assert page.status_code == 200, page.text
    assert _rows(page.text) == ["acme", "globex", "initech"]  # by discards, then by name
    acme_row = page.text.split(f'href="{D}/t/acme/jobs">acme</a>', 1)[1].split("</tr>", 1)[0]
    cells = [c.split("</td>")[0] for c in acme_row.split('<td class="num">')[1:]]
    assert cells == ["0", "0", "0", "0", "2", "2", "0"]  # ... discarded 2, in the last hour 2
    assert page.text.count('<tr class="sick">') == 2  # acme's discards, globex's idle backlog
    by_backlog = client.get(f"{D}/t/acme/fleet?sort=backlog", headers=FRAN).text
    assert _rows(by_backlog) == ["globex", "acme", "initech"]
    assert _rows(client.get(f"{D}/t/acme/fleet?sort=tenant", headers=FRAN).text) == [
        "acme",
        "globex",
        "initech",
    ]
    assert f'<a href="{D}/t/acme/fleet" class="current" aria-current="page">Fleet</a>' in page.text
    bad = client.get(f"{D}/t/acme/fleet?sort=name", headers=FRAN)
    assert bad.status_code == 400 and "sort &#39;name&#39; is not one the dashboard offers" in (
        bad.text
    )


def test_without_fleet_read_there_is_no_fleet(serve: Serve, tmp_path: Path) -> None:
    client = serve(deployment(), registered=dict(THREE))
    for token in ("admin", "reader", "ops"):
        headers = {"Authorization": f"Bearer {token}"}
        jobs = client.get(f"{D}/t/acme/jobs", headers=headers).text
        assert "/fleet" not in jobs, token
        refused = client.get(f"{D}/t/acme/fleet", headers=headers)
        assert refused.status_code == 403 and "fleet:read" in refused.text, token


def test_a_tenant_that_cannot_be_read_says_why_and_the_others_are_listed(
    serve: Serve, tmp_path: Path
) -> None:
    client = serve(deployment(), registered=dict(THREE))
    (tmp_path / "initech.db").unlink()  # its database is gone
    (tmp_path / "initech.db").mkdir()  # and a folder is in its place
    page = client.get(f"{D}/t/acme/fleet", headers=FRAN).text
    assert _rows(page)[0] == "initech"  # the unreadable first
    assert '<td colspan="8" class="problem-cell">cannot be read: ' in page
    assert _rows(page)[1:] == ["acme", "globex"]
