"""Find the line of a declaration in a test file by a trailing `# marker` comment."""

from __future__ import annotations

from pathlib import Path

from ket.declare import SourceLocation


def marked(marker: str, file: str) -> SourceLocation:
    """The location of the one line of `file` that ends with `# marker`."""
    lines = Path(file).read_text(encoding="utf-8").splitlines()
    found = [n for n, text in enumerate(lines, start=1) if text.rstrip().endswith(f"# {marker}")]
    assert len(found) == 1, f"marker {marker!r} is on lines {found} of {file}"
    return SourceLocation(file=file, line=found[0])
