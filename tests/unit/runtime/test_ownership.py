"""Rendezvous ownership: who owns which tenant, who counts as a peer, and how little moves when
a worker joins or leaves."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ket.runtime.ownership import owned, owners, peers_of, replicas, same_group, weight
from ket.store.roster import SeenWorker, WorkerInfo

MANIFEST = "a" * 64


def _info(
    worker_id: str,
    *,
    tenants: tuple[str, ...] | None = None,
    queues: tuple[str, ...] = ("default",),
    manifest: str = MANIFEST,
) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id,
        host="box",
        pid=1,
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        tenants=tenants,
        queues={queue: 4 for queue in queues},
        version="1.0",
        manifest_hash=manifest,
        interval_seconds=1.0,
    )


def _seen(info: WorkerInfo, ago: float = 0.5) -> SeenWorker:
    return SeenWorker(info=info, last_seen_at=datetime.now(UTC), seen_seconds_ago=ago)


def _assignment(tenants: list[str], peers: list[str]) -> dict[str, frozenset[str]]:
    """Each worker's tenants, as each would compute them itself."""
    return {worker: owned(worker, tenants, peers) for worker in peers}


def _holders(tenants: list[str], assignment: dict[str, frozenset[str]]) -> dict[str, set[str]]:
    """Each tenant's owners, from every worker's own answer."""
    found: dict[str, set[str]] = {tenant: set() for tenant in tenants}
    for worker, mine in assignment.items():
        for tenant in mine:
            found[tenant].add(worker)
    return found


def test_the_weight_is_a_stable_hash_of_tenant_and_worker_not_python_s_salted_one() -> None:
    # pinned: every process and every release must rank workers alike
    assert weight("acme", "host:1:abcdef") == weight("acme", "host:1:abcdef")
    assert weight("acme", "host:1:abcdef") == 0x95F7CD692C69C6F9
    assert weight("acme", "w1") != weight("w1", "acme")


def test_replicas_spread_few_tenants_over_every_worker_and_give_many_tenants_one_owner() -> None:
    assert [replicas(w, 12) for w in (1, 3, 12, 13, 25)] == [1, 1, 1, 2, 3]
    assert [replicas(5, t) for t in (0, 1, 2, 5, 100)] == [5, 5, 3, 1, 1]
    with pytest.raises(ValueError, match="workers must be at least 1, got 0"):
        replicas(0, 3)


def test_owners_are_the_peers_ranked_highest_for_the_tenant() -> None:
    peers = ["w1", "w2", "w3", "w4"]
    ranked = sorted(peers, key=lambda w: weight("acme", w), reverse=True)
    assert owners("acme", peers, 2) == tuple(ranked[:2])
    assert owners("acme", reversed(peers), 2) == tuple(ranked[:2])  # order of peers is no matter


def test_a_worker_counts_itself_even_when_its_row_is_not_listed() -> None:
    assert owned("me", ["acme", "globex"], []) == {"acme", "globex"}


def test_peers_are_live_workers_of_the_same_manifest_and_queues_serving_every_tenant() -> None:
    me = _info("me")
    seen = [
        _seen(me),
        _seen(_info("twin")),
        _seen(_info("busier", queues=("default",))),
        _seen(_info("gone"), ago=10.0),  # stale: 3 intervals of 1 s passed
        _seen(_info("one-tenant", tenants=("acme",))),  # `--tenant acme` takes no part
        _seen(_info("email-only", queues=("email",))),  # another group: never takes ours
        _seen(_info("more-queues", queues=("default", "email"))),
        _seen(_info("other-release", manifest="b" * 64)),
    ]
    assert peers_of(me, seen) == {"me", "twin", "busier"}
    assert peers_of(me, []) == {"me"}


def test_a_worker_of_one_tenant_has_no_group() -> None:
    alone = _info("alone", tenants=("acme",))
    assert not same_group(alone, _info("other"))
    assert not same_group(alone, alone)


def test_twelve_tenants_over_three_workers_give_each_tenant_exactly_one_owner() -> None:
    tenants = [f"t{n}" for n in range(12)]
    assignment = _assignment(tenants, ["w1", "w2", "w3"])
    assert all(len(owners) == 1 for owners in _holders(tenants, assignment).values())
    assert sorted(t for mine in assignment.values() for t in mine) == sorted(tenants)


def test_two_tenants_over_five_workers_give_each_tenant_three_owners() -> None:
    assignment = _assignment(["acme", "globex"], [f"w{n}" for n in range(5)])
    holders = _holders(["acme", "globex"], assignment)
    assert [len(holders["acme"]), len(holders["globex"])] == [3, 3]


workers_st = st.lists(
    st.text(alphabet="abcdefghijklmnop0123456789:", min_size=1, max_size=20),
    min_size=1,
    max_size=12,
    unique=True,
)


@settings(max_examples=100, deadline=None)
@given(workers=workers_st, count=st.integers(min_value=1, max_value=60))
def test_every_tenant_has_its_replicas_of_owners_among_the_peers(
    workers: list[str], count: int
) -> None:
    tenants = [f"tenant_{n}" for n in range(count)]
    holders = _holders(tenants, _assignment(tenants, workers))
    expected = replicas(len(workers), count)
    for tenant in tenants:
        assert len(holders[tenant]) == expected >= 1
        assert holders[tenant] <= set(workers)


def _tolerance(tenants: int, share: float) -> float:
    """Six standard deviations of a binomial count, plus one: a hash spreads like dice."""
    return 6 * math.sqrt(tenants * share * (1 - share)) + 1


@settings(max_examples=100, deadline=None)
@given(
    workers=st.integers(min_value=1, max_value=8),
    count=st.integers(min_value=50, max_value=400),
    salt=st.text(alphabet="xyz0123456789", max_size=6),
)
def test_each_worker_s_share_is_close_to_its_fair_part(workers: int, count: int, salt: str) -> None:
    peers = [f"host{n}:{salt}" for n in range(workers)]
    tenants = [f"tenant_{n}" for n in range(count)]
    fair = replicas(workers, count) / workers
    for worker, mine in _assignment(tenants, peers).items():
        assert abs(len(mine) - count * fair) <= _tolerance(count, fair), (worker, len(mine))


@settings(max_examples=100, deadline=None)
@given(
    workers=st.integers(min_value=1, max_value=8),
    count=st.integers(min_value=20, max_value=300),
    salt=st.text(alphabet="xyz0123456789", max_size=6),
)
def test_a_new_worker_takes_about_its_part_and_nothing_else_moves(
    workers: int, count: int, salt: str
) -> None:
    peers = [f"host{n}:{salt}" for n in range(workers)]
    newcomer = f"new:{salt}"
    tenants = [f"tenant_{n}" for n in range(count)]
    before = _holders(tenants, _assignment(tenants, peers))
    joined = _assignment(tenants, [*peers, newcomer])
    after = _holders(tenants, joined)
    moved = [t for t in tenants if before[t] != after[t]]
    # a tenant changes hands only to the newcomer: no old worker takes another's tenant
    for tenant in moved:
        assert after[tenant] - before[tenant] == {newcomer}
    part = 1 / (workers + 1)
    assert abs(len(moved) - count * part) <= _tolerance(count, part)
    assert set(moved) == joined[newcomer]


@settings(max_examples=100, deadline=None)
@given(
    workers=st.integers(min_value=2, max_value=8), count=st.integers(min_value=10, max_value=200)
)
def test_a_worker_that_leaves_gives_up_only_its_own_tenants(workers: int, count: int) -> None:
    peers = [f"w{n}" for n in range(workers)]
    tenants = [f"tenant_{n}" for n in range(count)]
    before = _holders(tenants, _assignment(tenants, peers))
    after = _holders(tenants, _assignment(tenants, peers[1:]))
    for tenant in tenants:
        if peers[0] not in before[tenant]:
            assert after[tenant] == before[tenant]
        assert after[tenant]  # the leaver's tenants all found a new owner
