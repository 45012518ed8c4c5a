"""KET_PRESENCE_INTERVAL_S: how often a worker reports itself to the control database."""

from __future__ import annotations

from typing import Any

import pytest

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.cli.presence import report_interval
from ket.errors import KetError


def handler(ctx: Any, input: Any) -> None:
    """A handler."""


SHOP = define_module(name="shop", jobs={"ship": define_job(idempotent=True, handler=handler)})
CATALOG = Catalog.build(
    define_deployment(name="shop", modules=[SHOP], worker={"lease_ms": 12_000}), environ={}
)


def test_the_report_interval_is_a_third_of_the_lease_unless_the_variable_sets_it() -> None:
    assert report_interval(CATALOG, {}) == 4.0
    assert report_interval(CATALOG, {"KET_PRESENCE_INTERVAL_S": ""}) == 4.0
    assert report_interval(CATALOG, {"KET_PRESENCE_INTERVAL_S": "0.25"}) == 0.25
    assert report_interval(CATALOG, {"KET_PRESENCE_INTERVAL_S": "60"}) == 60.0


@pytest.mark.parametrize("text", ["0", "-1", "60.5", "nan", "inf", "soon"])
def test_a_report_interval_out_of_bounds_or_not_a_number_is_refused_naming_it(text: str) -> None:
    with pytest.raises(KetError) as refused:
        report_interval(CATALOG, {"KET_PRESENCE_INTERVAL_S": text})
    assert refused.value.message == (
        f"KET_PRESENCE_INTERVAL_S must be seconds above 0 and at most 60, got {text!r}"
    )
