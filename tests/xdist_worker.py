"""Loaded first (`-p tests.xdist_worker` in pyproject's addopts), before Django's settings are read: under
pytest-xdist (`make test` runs two workers) each worker gets its own Redis database, as each gets its own test
database from pytest-django (test_<name>_gw0, _gw1). Redis holds this run's Celery messages, the cache (the sign-in
lock-out counts, name locks of the fail-open cache) and the keys tests/conftest.py deletes when a session ends: shared,
one worker's clean-up or cache.clear() would take the other's. xdist sets PYTEST_XDIST_WORKER ("gw0", "gw1", ...)
before the worker reads its configuration; worker N uses database (d + N) mod 16 of REDIS_URL's d (and of
INTEGRATION_REDIS_URL's). Without xdist nothing changes."""
from __future__ import annotations

import os
import re

_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if re.fullmatch(r"gw\d+", _worker):
    _n = int(_worker[2:])
    for _var in ("REDIS_URL", "INTEGRATION_REDIS_URL"):
        _url = os.environ.get(_var)
        if not _url:
            continue
        _m = re.fullmatch(r"(redis://[^/?#]*)(?:/(\d*))?(\?.*)?", _url)
        if _m is None:
            continue  # a form this does not know (a socket path): left as it is
        _db = int(_m.group(2) or 0)
        os.environ[_var] = f"{_m.group(1)}/{(_db + _n) % 16}{_m.group(3) or ''}"
