"""How a deployment's worker runs: queues and their concurrency, polling, leases, sweeps."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

DEFAULT_QUEUES = {"default": 10}


class WorkerConfig(BaseModel):
    """The `worker={...}` of a deployment, validated; every queue a job uses must be in `queues`."""

    # strict: a declared value is Python, so True or "50" is a mistake, not a 1 or a 50
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    queues: dict[str, PositiveInt] = Field(default_factory=lambda: dict(DEFAULT_QUEUES))
    poll_min_ms: PositiveInt = 50
    poll_max_ms: PositiveInt = 2_000
    tenant_refresh_ms: PositiveInt = 30_000
    lease_ms: PositiveInt = 30_000
    shutdown_grace_ms: int = Field(default=15_000, ge=0)
    schedule_sweep_ms: PositiveInt = 30_000

    @model_validator(mode="after")
    def _poll_range(self) -> WorkerConfig:
        if self.poll_max_ms < self.poll_min_ms:
            raise ValueError(
                f"poll_max_ms ({self.poll_max_ms}) must be at least "
                f"poll_min_ms ({self.poll_min_ms})"
            )
        if not self.queues:
            raise ValueError("queues must name at least one queue")
        return self
