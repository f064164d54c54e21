"""Variants for `manage.py replay --what-if FILE`: the same trace under two (or more) policies or quota sets.

A what-if file (YAML or JSON) maps a variant name to its changes from the cluster as imported:

    baseline: {}
    more-for-vision:
      policy: full                  # full | fifo (manage.py replay's POLICIES), default full
      config: {backfill: false}     # CycleConfig fields over the policy's
      quotas: {vision: {P100: [8, 64, 128]}}   # queue -> flavor -> [guarantee, quota, limit or null], GPUs
                                    # from 0 to 2147483647 (QUOTA_MAX: the API's range)
      weights: {vision: 2.0}        # queue -> weight, 0.001 to 1,000,000 (the API's range)

`apply_variant(cluster, variant, policies)` -> (ClusterSpec, CycleConfig); raises VariantError naming the
variant's field at fault (an unknown policy, config field, queue, or a quota breaking guarantee <= quota <=
limit). Pure: no I/O (the command reads the file).
"""
from __future__ import annotations

import math
from dataclasses import fields, replace

from clusterspec.spec import ClusterSpec
from scheduler.core.snapshot import CycleConfig

# a queue weight's range, one for the replay's variants and the platform (gpuplatform.services.queues imports it:
# the queue API, the admin form, the what-if's set_weight); new-user trial 12, F13: 1e9 and 1e-7 were replayed
WEIGHT_MIN = 0.001
WEIGHT_MAX = 1_000_000
# a quota's range (guarantee, quota and limit, in GPUs): one rule for the replay's variants, the what-if
# (scheduler.forecast.whatif) and the platform (gpuplatform.quota_rules and the quota and forecast serializers import
# it: the quota API, the admin, the forecast API's set_quota); the platform stores it in a 32-bit column, so this is
# the most it can hold. New-user trial 13: the quota API took up to 2147483647, the forecast's set_quota 10,000,000
QUOTA_MAX = 2**31 - 1
ALLOWED = {"policy", "config", "quotas", "weights"}


class VariantError(ValueError):
    pass


def quota_error(name: str, value) -> str | None:
    """The rule a guarantee, quota or limit (`name`) of `value` GPUs breaks: a whole number from 0 to QUOTA_MAX
    (None: none; a limit of None, no cap, is the caller's to allow)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= QUOTA_MAX:
        return f"{name} must be a whole number of GPUs from 0 to {QUOTA_MAX}"
    return None


def apply_variant(cluster: ClusterSpec, variant: dict, policies: dict[str, CycleConfig], name: str = "variant"
                  ) -> tuple[ClusterSpec, CycleConfig]:
    if not isinstance(variant, dict):
        raise VariantError(f"{name}: must be a mapping of {sorted(ALLOWED)}")
    unknown = set(variant) - ALLOWED
    if unknown:
        raise VariantError(f"{name}.{sorted(unknown)[0]}: unknown field (allowed: {', '.join(sorted(ALLOWED))})")
    policy = variant.get("policy", "full")
    if policy not in policies:
        raise VariantError(f"{name}.policy: must be one of {', '.join(sorted(policies))}")
    config = policies[policy]
    knobs = {f.name for f in fields(CycleConfig)}
    extra = variant.get("config") or {}
    bad = set(extra) - knobs
    if bad:
        raise VariantError(f"{name}.config.{sorted(bad)[0]}: not a CycleConfig field")
    config = replace(config, **extra)
    queues = {q.name: q for q in cluster.queues}
    for qname, per_flavor in (variant.get("quotas") or {}).items():
        q = queues.get(qname)
        if q is None:
            raise VariantError(f"{name}.quotas.{qname}: no such queue")
        quotas = dict(q.quotas)
        for flavor, value in per_flavor.items():
            try:
                g, d, lim = value
            except (TypeError, ValueError) as exc:
                raise VariantError(
                    f"{name}.quotas.{qname}.{flavor}: must be [guarantee, quota, limit or null]") from exc
            # a whole float (YAML's 8.0) is that number, as the API takes 2.0 for 2
            g, d, lim = (int(v) if isinstance(v, float) and v.is_integer() else v for v in (g, d, lim))
            for field, v in (("guarantee", g), ("quota", d), ("limit", lim)):
                error = None if field == "limit" and v is None else quota_error(field, v)
                if error:
                    raise VariantError(f"{name}.quotas.{qname}.{flavor}: {error}")
            if not g <= d or (lim is not None and d > lim):
                raise VariantError(f"{name}.quotas.{qname}.{flavor}: must hold 0 <= guarantee <= quota <= limit")
            quotas[flavor] = (g, d, lim)
        queues[qname] = replace(q, quotas=quotas)
    for qname, weight in (variant.get("weights") or {}).items():
        if qname not in queues:
            raise VariantError(f"{name}.weights.{qname}: no such queue")
        if isinstance(weight, str):
            raise VariantError(f"{name}.weights.{qname}: {weight!r} is not a number (YAML reads a number such as 1e3 "
                               f"without a dot in it as a string: write 1.0e3)")
        if (isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight)
                or not WEIGHT_MIN <= weight <= WEIGHT_MAX):
            raise VariantError(f"{name}.weights.{qname}: weight must be a number from {WEIGHT_MIN} to {WEIGHT_MAX:,}")
        queues[qname] = replace(queues[qname], weight=float(weight))
    return replace(cluster, queues=tuple(queues.values())), config
