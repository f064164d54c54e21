"""The shared cache (throttle counters, login lock-outs): Redis when REDIS_URL is set, so every gunicorn
process counts the same requests; this process's memory otherwise (the embedded demo, tests).

`FailOpenRedisCache` never lets a Redis outage fail or stall a request: connects time out after
settings-given seconds (0.5 s by default), and after a failure the cache answers as empty for
RETRY_SECONDS (gets return the default, writes are dropped) instead of trying again on every call. Throttles
therefore stop counting while Redis is down rather than refusing or blocking every request.
"""
from __future__ import annotations

import logging
import time

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.redis import RedisCache

log = logging.getLogger("gpuplatform.cache")

RETRY_SECONDS = 5.0


class FailOpenRedisCache(RedisCache):
    _down_until = 0.0

    def _guard(self, name: str, default, *args, **kwargs):
        if time.monotonic() < FailOpenRedisCache._down_until:
            return default
        try:
            return getattr(super(), name)(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - redis-py raises ConnectionError / TimeoutError and friends
            FailOpenRedisCache._down_until = time.monotonic() + RETRY_SECONDS
            log.warning("shared cache unavailable (%s); answering as empty for %.0f s", exc.__class__.__name__, RETRY_SECONDS)
            return default

    def get(self, key, default=None, version=None):
        return self._guard("get", default, key, default, version)

    def set(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):  # noqa: A003 - Django's name
        self._guard("set", None, key, value, timeout, version)

    def add(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        return self._guard("add", False, key, value, timeout,
                           version)

    def delete(self, key, version=None):
        return self._guard("delete", False, key, version)

    def get_many(self, keys, version=None):
        return self._guard("get_many", {}, keys, version)

    def set_many(self, data, timeout=DEFAULT_TIMEOUT, version=None):
        return self._guard("set_many", [], data, timeout,
                           version)

    def incr(self, key, delta=1, version=None):
        return self._guard("incr", delta, key, delta, version)

    def touch(self, key, timeout=DEFAULT_TIMEOUT, version=None):
        return self._guard("touch", False, key, timeout,
                           version)

    def has_key(self, key, version=None):
        return self._guard("has_key", False, key, version)

    def clear(self):
        return self._guard("clear", False)
