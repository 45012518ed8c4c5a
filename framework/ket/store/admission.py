"""Which due jobs a claim within fleet-wide limits may start: the one rule every store keeps.

A claim of a queue with limits (types.ClaimLimits) runs one at a time per queue, in one
transaction, and reads three things: the running attempts by job and concurrency key, the starts
within each rate's period, and then the due jobs whose keys are not full, in claim order. From
the first two, `Counts.full` says which keys to pass over (so that the candidates are read past
them: other keys flow) and whether the queue itself is full; `Counts.admit` walks the candidates
in order and starts each one that every limit allows, counting it at once against its keys.

Keys are `<job name>|<key values as JSON>` (catalog.limit_key): a job's concurrency key names
the attempts its concurrency limit counts together, its rate key the starts its rate counts.
The queue's own rate counts its starts under QUEUE_SCOPE.

Starts are kept by the tenth of their rate's period (RATE_BUCKETS): a start is recorded at the
beginning of its tenth (`bucket_of`), and the starts of one tenth of one scope add up in one
record, so that a claim reads at most eleven records a scope however many claims a period
holds. A tenth counts while any of it lies within the period (`counts_at`): the limit holds in
every span of the period, and a start leaves the count up to a tenth of the period late.

The memory and SQLite stores run this module. PostgreSQL runs the same rule, step for step, in
the database function ket_limited_claim (sql/migration.py, migration 11), so that a limited
claim costs one round trip; a change here is a new migration there, and the conformance kit's
area `limits` holds the three stores to the same behaviour.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ket.store.types import ClaimLimits, JobId, Rate

QUEUE_SCOPE = "*"  # the queue's own rate, beside its jobs' rate keys (which hold a '|')
RATE_BUCKETS = 10  # the starts of a tenth of a rate's period are kept together
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def bucket_width(rate: Rate) -> timedelta:
    """A tenth of `rate`'s period, in whole microseconds (at least one)."""
    return _tenth(rate.period_seconds)


def _tenth(period_seconds: float) -> timedelta:
    return _MICROSECOND * max(round(period_seconds * (1_000_000 // RATE_BUCKETS)), 1)


def bucket_of(at: datetime, rate: Rate) -> datetime:
    """The beginning of the tenth of `rate`'s period that `at` falls in, counted in whole
    microseconds from the Unix epoch (PostgreSQL's ket_limited_claim computes the same)."""
    width = bucket_width(rate) // _MICROSECOND
    return _EPOCH + _MICROSECOND * ((at - _EPOCH) // _MICROSECOND // width * width)


def counts_at(start: datetime, rate: Rate, now: datetime) -> bool:
    """Whether the starts recorded at `start` (the beginning of a tenth) count against `rate`
    at `now`: some of their tenth lies within the period that ends at `now`."""
    return start + bucket_width(rate) > now - timedelta(seconds=rate.period_seconds)


def frees_at(start: datetime, rate: Rate) -> datetime:
    """When the starts recorded at `start` stop counting against `rate`."""
    return start + bucket_width(rate) + timedelta(seconds=rate.period_seconds)


@dataclass(frozen=True, slots=True)
class Start:
    """`n` attempts started at `at` under the rate scope `scope`."""

    scope: str
    at: datetime
    n: int


@dataclass(frozen=True, slots=True)
class Candidate:
    """A due job the claim may start, with its keys."""

    id: JobId
    name: str
    concurrency_key: str | None
    rate_key: str | None


@dataclass(slots=True)
class Admitted:
    """The jobs a claim starts, the starts to record per rate scope, and when a rate that held
    a job back lets one start again (None: no rate held one back)."""

    ids: list[JobId] = field(default_factory=list)
    starts: Counter[str] = field(default_factory=Counter)
    retry_at: datetime | None = None
    # a concurrency limit held a job back, or a key (or the queue) is at its concurrency limit:
    # an attempt's end may let a waiting job start
    contended: bool = False


@dataclass(slots=True)
class Counts:
    """What runs and what started of one queue, as a limited claim read them at `now`."""

    limits: ClaimLimits
    now: datetime
    running: Counter[str | None]  # by concurrency key (None: jobs that have none)
    starts: Sequence[Start]
    # by rate scope, the starts within its rate's period (only the scopes that have a rate)
    in_period: Counter[str] = field(default_factory=Counter)

    @classmethod
    def read(
        cls,
        limits: ClaimLimits,
        now: datetime,
        running: Iterable[tuple[str | None, int]],
        starts: Iterable[Start],
    ) -> Counts:
        counted: Counter[str | None] = Counter()
        for key, n in running:
            counted[key] += n
        kept = list(starts)
        in_period: Counter[str] = Counter()
        for start in kept:
            rate = _rate_of(limits, start.scope)
            if rate is not None and counts_at(start.at, rate, now):
                in_period[start.scope] += start.n
        return cls(limits=limits, now=now, running=counted, starts=kept, in_period=in_period)

    def started(self, scope: str) -> int:
        """How many attempts of `scope` started within its rate's period."""
        return self.in_period[scope]

    def full(self) -> tuple[list[str], list[str], bool]:
        """The concurrency keys and the rate keys at their limit, and whether the queue is."""
        limits = self.limits
        concurrency = sorted(
            key
            for key, n in self.running.items()
            if key is not None
            and (job := limits.jobs.get(_name(key))) is not None
            and job.concurrency is not None
            and n >= job.concurrency
        )
        rate = sorted(
            scope
            for scope in {s.scope for s in self.starts} - {QUEUE_SCOPE}
            if (job := limits.jobs.get(_name(scope))) is not None
            and job.rate is not None
            and self.started(scope) >= job.rate.limit
        )
        return concurrency, rate, self._room() <= 0

    def _room(self) -> float:
        """How many more attempts the queue's own limits let start now."""
        limits = self.limits
        room = float("inf")
        if limits.concurrency is not None:
            room = min(room, limits.concurrency - sum(self.running.values()))
        if limits.rate is not None:
            room = min(room, limits.rate.limit - self.started(QUEUE_SCOPE))
        return room

    def admit(self, candidates: Sequence[Candidate], limit: int) -> Admitted:
        """Up to `limit` of `candidates`, in their order, each one every limit allows."""
        limits, admitted = self.limits, Admitted()
        room = self._room()
        running: Counter[str | None] = Counter()
        held_by_rate: set[str] = set()
        for job in candidates:
            if len(admitted.ids) >= limit or room <= 0:
                break
            rules = limits.jobs.get(job.name)
            if rules is not None and rules.concurrency is not None and job.concurrency_key:
                key = job.concurrency_key
                if self.running[key] + running[key] >= rules.concurrency:
                    admitted.contended = True
                    continue
            if rules is not None and rules.rate is not None and job.rate_key:
                scope = job.rate_key
                if self.started(scope) + admitted.starts[scope] >= rules.rate.limit:
                    held_by_rate.add(scope)
                    continue
                admitted.starts[scope] += 1
            running[job.concurrency_key] += 1
            admitted.ids.append(job.id)
            room -= 1
        if limits.rate is not None and admitted.ids:
            admitted.starts[QUEUE_SCOPE] += len(admitted.ids)
        admitted.retry_at = self._retry_at(held_by_rate, admitted)
        if limits.concurrency is not None:
            admitted.contended |= sum(self.running.values()) + len(admitted.ids) >= (
                limits.concurrency
            )
        return admitted

    def _retry_at(self, held: set[str], admitted: Admitted) -> datetime | None:
        """When the first start counted against a rate that is full leaves its period: a held
        job may start then (the claim then looks again)."""
        limits = self.limits
        scopes: dict[str, Rate] = {}
        for scope in held:
            rate = limits.jobs[_name(scope)].rate
            assert rate is not None
            scopes[scope] = rate
        queue = limits.rate
        started = 0 if queue is None else self.started(QUEUE_SCOPE)
        if queue is not None and started + admitted.starts[QUEUE_SCOPE] >= queue.limit:
            scopes[QUEUE_SCOPE] = queue
        ends = [
            frees_at(start.at, rate)
            for start in self.starts
            if (rate := scopes.get(start.scope)) is not None and counts_at(start.at, rate, self.now)
        ]
        if scopes and not ends:  # every start of the period is this claim's own
            ends = [frees_at(bucket_of(self.now, rate), rate) for rate in scopes.values()]
        return min(ends, default=None)

    def recorded(self, admitted: Admitted) -> list[Start]:
        """The starts of `admitted` as they are recorded: each scope's at the beginning of the
        tenth of its rate's period that `now` falls in."""
        found = []
        for scope, n in sorted(admitted.starts.items()):
            rate = _rate_of(self.limits, scope)
            assert rate is not None  # only a rate's scope counts starts
            found.append(Start(scope=scope, at=bucket_of(self.now, rate), n=n))
        return found


def _rate_of(limits: ClaimLimits, scope: str) -> Rate | None:
    """The rate that counts the starts of `scope`: the queue's, or its job's."""
    if scope == QUEUE_SCOPE:
        return limits.rate
    job = limits.jobs.get(_name(scope))
    return None if job is None else job.rate


def kept_since(limits: ClaimLimits, now: datetime) -> datetime:
    """Where the starts that may still count against a rate of `limits` at `now` begin: the
    longest period and its tenth back (older ones count no more)."""
    longest = longest_period(limits)
    return now - timedelta(seconds=longest) - _tenth(longest)


def longest_period(limits: ClaimLimits) -> float:
    """The longest rate period of a queue's limits (0.0: it has no rate)."""
    periods = [job.rate.period_seconds for job in limits.jobs.values() if job.rate is not None]
    if limits.rate is not None:
        periods.append(limits.rate.period_seconds)
    return max(periods, default=0.0)


def has_rate(limits: ClaimLimits) -> bool:
    return longest_period(limits) > 0


def _name(key: str) -> str:
    """The job name a key starts with."""
    return key.split("|", 1)[0]
