"""The manifest: compile declarations, write and read canonical YAML."""

from ket.manifest.compile import compile_manifest
from ket.manifest.document import dump_manifest, load_manifest, read_manifest
from ket.manifest.model import (
    FORMAT,
    ConcurrencyLimitEntry,
    FunctionEntry,
    JobEntry,
    Manifest,
    ModelEntry,
    ModuleEntry,
    QueueLimitsEntry,
    RateLimitEntry,
    ScheduleEntry,
    ServeEntry,
    WorkerEntry,
)

__all__ = [
    "FORMAT",
    "ConcurrencyLimitEntry",
    "FunctionEntry",
    "JobEntry",
    "Manifest",
    "ModelEntry",
    "ModuleEntry",
    "QueueLimitsEntry",
    "RateLimitEntry",
    "ScheduleEntry",
    "ServeEntry",
    "WorkerEntry",
    "compile_manifest",
    "dump_manifest",
    "load_manifest",
    "read_manifest",
]
