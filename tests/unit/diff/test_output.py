"""A job's output in ket diff: results kept from now on are safe; results no longer kept, or kept
in another shape, are for review (a dependant or a tool may read them)."""

from __future__ import annotations

from typing import Any

from ket.diff import diff_manifests

from .build import change, job, manifest, schema

SUBJECT = "job sales.send"
RECEIPT = schema("sales.send.output", receipt=(str, ...))


def diff_job(before: dict[str, Any], after: dict[str, Any]) -> list[Any]:
    return diff_manifests(
        manifest(jobs={"sales.send": before}), manifest(jobs={"sales.send": after})
    )


def test_an_output_added_is_safe() -> None:
    assert diff_job(job(), job(output=RECEIPT)) == [
        change(
            "safe",
            "output_added",
            SUBJECT,
            "output added: results are kept from now on",
            new=RECEIPT,
        )
    ]


def test_an_output_removed_is_for_review() -> None:
    assert diff_job(job(output=RECEIPT), job()) == [
        change(
            "review",
            "output_removed",
            SUBJECT,
            "output removed: results are no longer kept, and their readers get none",
            old=RECEIPT,
        )
    ]


def test_an_output_of_another_shape_is_for_review() -> None:
    other = schema("sales.send.output", total=(float, ...))
    assert diff_job(job(output=RECEIPT), job(output=other)) == [
        change(
            "review",
            "output_changed",
            SUBJECT,
            "output changed: results already stored keep their old shape",
            old=RECEIPT,
            new=other,
        )
    ]
