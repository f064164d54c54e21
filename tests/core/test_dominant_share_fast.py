"""fairshare.dominant_share's one-flavor path (a call per start) gives the same float as the general sum over
flavors, bit for bit, on random usages, decayed offsets and fair shares of zero to two flavors (issue 16,
session 11)."""
from __future__ import annotations

import random
from types import SimpleNamespace

from scheduler.core.plugins.fairshare import EPS, dominant_share


def _reference(usage: dict, shares: dict, queue: str, offset: dict | None) -> float:
    """dominant_share before the one-flavor path: the usage copied, the offsets added, the max over flavors."""
    best = 0.0
    fair = shares.get(queue, {})
    used_by_flavor = dict(usage.get(queue, {}))
    for flavor, extra in (offset or {}).get(queue, {}).items():
        used_by_flavor[flavor] = used_by_flavor.get(flavor, 0) + extra
    for flavor, used in used_by_flavor.items():
        if used > EPS:
            f = fair.get(flavor, 0.0)
            best = max(best, used / f if f > EPS else 1e6 + used)
    return best


def _some(rng: random.Random, flavors: list[str], value) -> dict:
    return {f: value() for f in rng.sample(flavors, rng.randint(0, len(flavors)))}


def test_one_flavor_path_equals_the_general_sum():
    rng = random.Random(11)
    flavors = ["H100", "A100"]
    seen_fast = 0
    for _ in range(20000):
        pool = flavors[:rng.randint(1, 2)]
        usage = {"q": _some(rng, pool, lambda: rng.choice([0, 1, 3, 64, rng.randint(0, 500)]))}
        if rng.random() < 0.1:
            usage = {}
        offset = {"q": _some(rng, pool, lambda: rng.choice([0.0, -1e-12, 1e-12, rng.uniform(-50, 50),
                                                              rng.uniform(0, 1e-10)]))}
        if rng.random() < 0.2:
            offset = None if rng.random() < 0.5 else {}
        shares = {"q": _some(rng, pool, lambda: rng.choice([0.0, 1e-12, rng.uniform(0, 100), 8.0]))}
        queues = SimpleNamespace(usage=usage)
        got = dominant_share(queues, shares, "q", offset)
        want = _reference(usage, shares, "q", offset)
        assert got == want and type(got) is type(want), (usage, offset, shares, got, want)
        seen_fast += len(usage.get("q", {})) <= 1 and len((offset or {}).get("q", {})) <= 1
    assert seen_fast > 5000
