"""Which tenants a worker process serves when several share them: rendezvous hashing.

Every worker of a group computes the same answer from the same inputs (the live peers and the
tenants) without talking to the others. For each tenant the peers are ranked by a stable hash of
(tenant, worker id); the top `r` own it, where r = max(1, ceil(W / T)) for W peers and T
tenants: with many tenants each has one owner, with few every tenant still gets several workers
(and no worker sits idle). A worker that joins takes only the tenants it now ranks first for,
about T / (W + 1) of them, and one that leaves gives up only its own: nothing else moves.

Peers are the live workers that could stand in for this one: they serve every tenant (not one
`--tenant`), run the same manifest (the same deployment at the same release, so the same jobs)
and the same queues. Workers that differ form groups of their own, each sharing all tenants
among its members: a tenant may then be served by one worker of each group (safe, claims are
leased and fenced), never by none.

    peers = peers_of(me, seen)                 # ids of the live workers sharing with me, me too
    mine = owned(me.id, tenants, peers)        # the tenants this worker serves
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Iterable

from ket.store.roster import SeenWorker, WorkerInfo


def weight(tenant: str, worker: str) -> int:
    """The rank of `worker` for `tenant`: a stable 64-bit hash, the same in every process and
    release (never Python's `hash()`, which is salted per process)."""
    key = f"{tenant}\x00{worker}".encode()  # neither a tenant name nor a worker id holds a NUL
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def replicas(workers: int, tenants: int) -> int:
    """How many workers own each tenant: max(1, ceil(workers / tenants))."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    return max(1, math.ceil(workers / max(tenants, 1)))


def owners(tenant: str, peers: Iterable[str], count: int) -> tuple[str, ...]:
    """The `count` peers ranked highest for `tenant`, best first (ties, which a 64-bit hash all
    but never has, broken by id)."""
    ranked = sorted(peers, key=lambda worker: (weight(tenant, worker), worker), reverse=True)
    return tuple(ranked[:count])


def owned(me: str, tenants: Collection[str], peers: Collection[str]) -> frozenset[str]:
    """The tenants `me` owns among `peers` (`me` counts whether listed or not)."""
    group = frozenset(peers) | {me}
    count = replicas(len(group), len(tenants))
    return frozenset(t for t in tenants if me in owners(t, group, count))


def peers_of(me: WorkerInfo, seen: Iterable[SeenWorker]) -> frozenset[str]:
    """The ids of the live workers that share the tenants with `me` (its own id included)."""
    found = {w.info.id for w in seen if not w.stale and same_group(me, w.info)}
    return frozenset(found | {me.id})


def same_group(me: WorkerInfo, other: WorkerInfo) -> bool:
    """Whether `other` can stand in for `me`: both serve every tenant and run the same manifest
    and the same queues (their concurrency may differ from host to host)."""
    return (
        me.tenants is None
        and other.tenants is None
        and other.manifest_hash == me.manifest_hash
        and set(other.queues) == set(me.queues)
    )
