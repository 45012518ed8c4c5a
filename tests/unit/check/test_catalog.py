"""The catalogue: stable ids, each with a level, title and an instruction as hint."""

from __future__ import annotations

import re
from pathlib import Path

from ket.check import CODES, Level

HERE = Path(__file__).parent


def test_ids_are_KET_and_three_digits_keyed_by_themselves() -> None:
    assert all(re.fullmatch(r"KET\d{3}", key) and CODES[key].id == key for key in CODES)


def test_every_code_has_a_title_and_a_hint() -> None:
    assert [key for key, code in CODES.items() if not (code.title and code.hint)] == []


def test_only_a_duplicate_effect_an_expiry_within_the_poll_and_a_window_past_retention_warn() -> (
    None
):
    assert {key for key, code in CODES.items() if code.level != Level.ERROR} == {
        "KET303",
        "KET707",
        "KET711",
    }
    assert CODES["KET303"].level == CODES["KET707"].level == CODES["KET711"].level
    assert CODES["KET711"].level == Level.WARNING


def test_every_catalogued_id_has_a_check_test_named_for_it() -> None:
    names = set()
    for path in HERE.glob("test_*.py"):
        names.update(re.findall(r"def (test_\w+)", path.read_text(encoding="utf-8")))
    untested = [
        key
        for key in CODES
        if not any(name.endswith(f"_{key}") or f"_{key}_" in name for name in names)
    ]
    assert untested == []
