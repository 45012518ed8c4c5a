"""Fingerprints: a short stable hash of a schedule's canonical definition."""

from __future__ import annotations

import hashlib


def fingerprint_of(canonical: str) -> str:
    """First 16 hex characters of the sha256 of a canonical definition string."""
    # 64 bits is ample to tell one job's schedule revisions apart, and short enough to read in
    # a manifest diff.
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]
