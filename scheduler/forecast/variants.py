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
variant's field at fault (an unknown policy, config field, queue or flavor, a config value of the wrong type
or out of CONFIG_RANGES, a `config` / `quotas` / `weights` of the wrong shape, or a quota breaking guarantee <=
quota <= limit). Pure: no I/O (the command reads the file).
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
DAY = 86400
# The range of each numeric CycleConfig field a variant may set (new-user trial 13, F5: `max_preemptors: -5` and
# `starvation_seconds: abc` were replayed). A field's type is its default's: a bool field takes true / false only,
# an int field a whole number, a float field any finite number (usage_half_life also null: by live usage only).
CONFIG_RANGES = {
    "max_preemptors": (0, 10_000),
    "max_reservations": (0, 10_000),
    "max_drains": (0, 10_000),
    "reschedule_every": (1, 1_000_000),  # cycles between planning rounds (cycle % reschedule_every)
    "reschedule_moves_per_hour": (0, 1_000_000),
    "reschedule_max_victims": (0, 10_000),
    "usage_half_life": (1, 3660 * DAY),  # seconds (null: no decay)
    "starvation_seconds": (0, 3660 * DAY),
    "reschedule_window": (0, 3660 * DAY),
    "reschedule_min_wait": (0, 3660 * DAY),
}


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
    extra = _mapping(variant, "config", name)
    for knob, value in extra.items():
        error = config_error(str(knob), value)
        if error:
            raise VariantError(f"{name}.config.{knob}: {error}")
    ints = {f.name for f in fields(CycleConfig) if type(f.default) is int}
    config = replace(config, **{k: int(v) if k in ints else v for k, v in extra.items()})  # YAML's 8.0 is 8
    queues = {q.name: q for q in cluster.queues}
    node_flavors = sorted({n.flavor for n in cluster.nodes})
    for qname, per_flavor in _mapping(variant, "quotas", name).items():
        q = queues.get(qname)
        if q is None:
            raise VariantError(f"{name}.quotas.{qname}: no such queue")
        if not isinstance(per_flavor, dict):
            raise VariantError(f"{name}.quotas.{qname}: must map flavor -> [guarantee, quota, limit or null], "
                               f"e.g. {{{(node_flavors or ['H200'])[0]}: [0, 8, 16]}}")
        quotas = dict(q.quotas)
        for flavor, value in per_flavor.items():
            if flavor not in node_flavors:
                raise VariantError(f"{name}.quotas.{qname}.{flavor}: no node of cluster {cluster.name!r} has this "
                                   f"flavor (its flavors: {', '.join(node_flavors) or 'none'})")
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
    for qname, weight in _mapping(variant, "weights", name).items():
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


def _mapping(variant: dict, key: str, name: str) -> dict:
    """variant[key] as a dict ({} when absent or null); VariantError naming it when it is something else."""
    value = variant.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        shape = {"config": "CycleConfig field -> value", "quotas": "queue -> flavor -> [guarantee, quota, limit or null]",
                 "weights": "queue -> weight"}[key]
        raise VariantError(f"{name}.{key}: must be a mapping of {shape}, not {type(value).__name__}")
    return value


def config_error(knob: str, value) -> str | None:
    """The rule a variant's CycleConfig value breaks (None: none): a known field; a bool field true or false; a
    whole number or a finite number within CONFIG_RANGES (module docstring)."""
    defaults = {f.name: f.default for f in fields(CycleConfig)}
    if knob not in defaults:
        return "not a CycleConfig field"
    default = defaults[knob]
    if isinstance(default, bool):
        if not isinstance(value, bool):
            hint = (" (a quoted word such as \"no\" is a string to YAML: write true or false)"
                    if isinstance(value, str) else "")
            return f"must be true or false, not {value!r}{hint}"
        return None
    if knob == "usage_half_life" and value is None:
        return None
    low, high = CONFIG_RANGES[knob]
    unit = " seconds" if isinstance(default, float) or default is None else ""
    if isinstance(default, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool)
        rule = f"must be a whole number from {low:,} to {high:,}"
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        rule = f"must be a number from {low:,} to {high:,}{unit}" + (" (or null: no decay)" if knob == "usage_half_life" else "")
    if not ok or not low <= value <= high:
        return f"{rule}, not {value!r}"
    return None
