"""Compare manifests: every difference as a typed Change, classified and rendered.

changes = diff_manifests(read_manifest("manifests/erp.yaml"), current)
print(render_text(changes))
sys.exit(1 if has_breaking(changes) else 0)
"""

from ket.diff.change import Change, Severity, has_breaking
from ket.diff.compare import diff_manifests
from ket.diff.render import render_json, render_text
from ket.diff.rule import RULES

__all__ = [
    "RULES",
    "Change",
    "Severity",
    "diff_manifests",
    "has_breaking",
    "render_json",
    "render_text",
]
