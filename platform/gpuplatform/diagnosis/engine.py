"""Failure diagnosis and node health rules: pure functions over plain data (no Django, no I/O).

Two rule tables, both data (YAML shipped beside this module, extended by admins through the database,
see docs/diagnosis.md):

- **Diagnosis rules** map what a failed attempt left behind (log lines, an exit code or signal) to a
  cause `category` (CATEGORIES) and an `action` on the retry (ACTIONS). A rule has either a `pattern`
  (a Python regular expression searched in each log line; an optional named group `xid` plus `xids`
  restricts it to those XID numbers) or a `when` condition on the task's end ({"signal": 9},
  {"exit_code": [126, 127]}), which only applies to a task that ended on its own (not stopped by the
  platform after the gang's first failure).
- **Health rules** map a GPU's or node's signals ({"xid": [79], "ecc_dbe_volatile": 2, ...}) to a node
  action (HEALTH_ACTIONS).

`diagnose(tasks, health=, platform=, rules=)` -> Diagnosis. How the root cause is chosen:

1. A platform cause (`platform`: cancelled, preempted, time limit, gang start timeout) names the
   attempt's end: category `platform`, except a time limit, which the user set: `user_error` (rule
   `platform:time_limit`, the platform's own event, as for the others; new-user trial 22, F7), and a cancel,
   which someone asked for and is neither a fault nor the job's error: `cancelled` (rule `platform:cancelled`;
   new-user trial 23). Node lost and agent
   exited (a task stopped because its node agent exited) are `platform` too, naming their node, unless (2) finds
   hardware.
2. Hardware first: a `gpu_hardware` match anywhere (a health event of one of the attempt's nodes in the
   window before the end, or a log line such as an NVRM Xid) is the root cause: a broken GPU makes every
   rank fail in some other way afterwards.
3. Otherwise the tasks are read in the order they ended (first task to end first). The first task with
   a match of a ROOT category (cuda_oom, host_oom, cuda_error, storage, nan_loss, user_error) gives the
   diagnosis: its highest category by PRECEDENCE, the earliest line of the first rule of that category.
   CONSEQUENCE categories (nccl_network, nccl_timeout) are what the other ranks of a gang print when
   one rank died or hung; they decide only when no task shows a root cause.
4. Conditions on the end (exit 126 / 127) come after log patterns. Then the `unknown` rules: what is
   known without a cause (a SIGKILL the platform did not send, a DataLoader worker killed: the OOM killer
   is the usual sender, but only a kernel OOM line or the supervisor's oom_kill counter line in the log
   makes it host_oom), their log lines before their end conditions; else `unknown`, no rule.
"""
from __future__ import annotations

import logging
import math
import re
import re._parser as sre_parse
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import regex  # the `regex` package: re's syntax (its VERSION0), and a time limit on one search

from .. import regex_safety

logger = logging.getLogger(__name__)

__all__ = [
    "CATEGORIES", "PLATFORM_ONLY_CATEGORIES", "ROOT_CATEGORIES", "CONSEQUENCE_CATEGORIES", "NODE_FAULT_CATEGORIES", "PRECEDENCE", "ACTIONS", "HEALTH_ACTIONS",
    "HEALTH_SIGNALS", "RuleError", "Rule", "RuleSet", "TaskEvidence", "HealthEvidence", "Diagnosis",
    "parse_rules", "diagnose", "HealthRule", "parse_health_rules", "evaluate_health", "health_rule_problems",
    "HEALTH_SIGNAL_UNITS",
]

CATEGORIES = ("cuda_oom", "nccl_timeout", "nccl_network", "gpu_hardware", "cuda_error", "nan_loss", "host_oom",
              "user_error", "storage", "platform", "cancelled", "unknown")
# Categories only the platform's own events give (never a rule's: rules read logs and exits)
PLATFORM_ONLY_CATEGORIES = ("platform", "cancelled")
# Cause before consequence: the order in which categories win, within one task and across tasks.
PRECEDENCE = ("gpu_hardware", "cuda_oom", "host_oom", "cuda_error", "storage", "nan_loss", "user_error",
              "nccl_network", "nccl_timeout", "unknown")
ROOT_CATEGORIES = frozenset(("gpu_hardware", "cuda_oom", "host_oom", "cuda_error", "storage", "nan_loss",
                             "user_error"))
CONSEQUENCE_CATEGORIES = frozenset(("nccl_network", "nccl_timeout"))
# The categories that are the node's fault when the diagnosis names a node (the failure page's "nodes with most
# failures", new-user trial 19, F4): a GPU's hardware (XID, ECC, NVLink, PCIe, fallen off the bus), the node's network
# (NCCL transport: InfiniBand, sockets) and `platform` with a node, which only a node's platform fault has
# (platform:node_lost, platform:agent_exited: NODE_CAUSES; a preemption, a cancel, a time limit or a gang start
# timeout names none). The others name where the failing task ran,
# not a fault of that node: the user's code or configuration (user_error), its memory use (cuda_oom, host_oom), its
# kernels (cuda_error, application XIDs), its data (nan_loss), its storage, a consequence (nccl_timeout) or no cause.
NODE_FAULT_CATEGORIES = frozenset(("gpu_hardware", "nccl_network", "platform"))
# The platform causes that happen on one node and name it: a lost node, and a node whose agent exited while the
# task ran (its supervisor stopped the task: an agent run with --stop-tasks-on-exit, execution.reports)
NODE_CAUSES = ("node_lost", "agent_exited")
# The platform causes the user set in motion: the platform stops the job, but at the user's own request (a time limit
# is the job's time_limit_seconds, as Slurm's TIMEOUT is the user's; a cancel was asked for by the job's owner or an
# admin: neither a fault nor an error, category `cancelled`). Category of each; the rule stays `platform:<cause>`
# (the evidence is the platform's own event, never logs).
USER_CAUSES = {"time_limit": "user_error", "cancelled": "cancelled"}
ACTIONS = ("retry", "exclude_node", "cancel_retries")
HEALTH_ACTIONS = ("record", "cordon", "drain", "fail_tasks")
# The signals a health rule may test (units: counts, seconds, booleans).
HEALTH_SIGNALS = ("xid", "ecc_dbe_volatile", "row_remap_failure", "thermal_slowdown_seconds",
                  "power_slowdown_seconds", "nvlink_down", "heartbeat_lost_seconds", "gpu_missing",
                  "repeat_offender_jobs")
MAX_LINE = 500  # evidence text is cut to this many characters
# An admin's rule is searched with time limits (the `regex` package's timeout). regex_safety refuses the patterns
# known to backtrack badly, but no static check finds them all (a cubic chain inside a group passed it: review 11,
# R1) and a log line may be 256 KiB long: a search of one line stops after LINE_SEARCH_SECONDS (that line is skipped
# for that rule), and the rule's searches of one task's log take at most RULE_LOG_SECONDS in all (then the rule is
# left out of the rest of that log); a warning names the rule. The shipped rules are Python's `re`, unlimited: they
# are tested on adversarial lines (tests/diagnosis), and `regex` runs some of them slower (review 11, S1).
LINE_SEARCH_SECONDS = 0.05
RULE_LOG_SECONDS = 0.5


class RuleError(ValueError):
    """A rule table entry is malformed. `field` names the entry and key, e.g. 'rules[3].pattern'."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass(frozen=True)
class Rule:
    """One diagnosis rule. Exactly one of `pattern` and `when` is set."""

    id: str
    category: str
    action: str
    source: str
    pattern: re.Pattern | regex.Pattern | None = None
    xids: frozenset[int] = frozenset()
    when: Mapping[str, Any] = field(default_factory=dict)
    order: int = 0  # position in the table: within a category, earlier rules are the more specific
    limited: bool = False  # an admin's rule: `pattern` is a regex.Pattern searched with a time limit

    def match_line(self, line: str, timeout: float | None = None) -> bool:
        """Whether the pattern (and its xids) matches `line`. timeout: seconds, for a `limited` rule (None: none).
        Raises TimeoutError when a limited search runs past it."""
        if self.pattern is None:
            return False
        m = self.pattern.search(line, timeout=timeout) if self.limited else self.pattern.search(line)
        if m is None:
            return False
        if self.xids:
            try:
                return int(m.group("xid")) in self.xids
            except (IndexError, TypeError, ValueError):
                return False
        return True

    def match_end(self, exit_code: int | None, signal: int | None) -> bool:
        if not self.when:
            return False
        for key, value in self.when.items():
            got = exit_code if key == "exit_code" else signal
            wanted = value if isinstance(value, (list, tuple)) else [value]
            if got is None or got not in wanted:
                return False
        return True


@dataclass(frozen=True)
class RuleSet:
    version: str
    rules: tuple[Rule, ...]

    @property
    def line_rules(self) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.pattern is not None)

    @property
    def end_rules(self) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.when)


def _check_common(entry: Mapping, where: str, seen: set) -> tuple[str, str, str, str]:
    if not isinstance(entry, Mapping):
        raise RuleError(where, "each rule must be a mapping")
    rid = entry.get("id")
    if not isinstance(rid, str) or not rid.strip():
        raise RuleError(f"{where}.id", "id must be a non-empty string")
    if rid in seen:
        raise RuleError(f"{where}.id", f"duplicate rule id {rid!r}")
    seen.add(rid)
    source = entry.get("source")
    if not isinstance(source, str) or not source.strip():
        raise RuleError(f"{where}.source", "every rule cites where its message comes from")
    return rid, source, entry.get("category"), entry.get("action")


def _entries(table: Mapping, extra: Iterable[Mapping]) -> list[tuple[str, Mapping]]:
    """[(where, entry)]: the table's rules ("rules[i]") then the `extra` ones ("extra[i]"). Raises RuleError
    when the table is not a mapping with a 'rules' list."""
    if not isinstance(table, Mapping) or not isinstance(table.get("rules"), list):
        raise RuleError("rules", "the table must be a mapping with a 'rules' list")
    return ([(f"rules[{i}]", e) for i, e in enumerate(table["rules"])]
            + [(f"extra[{i}]", e) for i, e in enumerate(extra)])


def parse_rules(table: Mapping, extra: Iterable[Mapping] = ()) -> RuleSet:
    """A RuleSet from a table {"version": ..., "rules": [{id, category, action, source, pattern | when,
    xids?}]} followed by `extra` entries of the same shape (admins' rules: they come after the shipped
    ones, so within a category a shipped rule is preferred). Raises RuleError naming the entry and key:
    unknown category or action, missing source, a pattern that does not compile, neither or both of
    pattern and when, a when key other than exit_code / signal, a duplicate id."""
    rules, seen = [], set()
    for order, (where, entry) in enumerate(_entries(table, extra)):
        rid, source, category, action = _check_common(entry, where, seen)
        if category not in CATEGORIES or category in PLATFORM_ONLY_CATEGORIES:
            raise RuleError(f"{where}.category", "category must be one of "
                            + ", ".join(c for c in CATEGORIES if c not in PLATFORM_ONLY_CATEGORIES))
        action = action or "retry"
        if action not in ACTIONS:
            raise RuleError(f"{where}.action", f"action must be one of {', '.join(ACTIONS)}")
        pattern, when = entry.get("pattern"), entry.get("when")
        if bool(pattern) == bool(when):
            raise RuleError(where, "a rule has exactly one of 'pattern' and 'when'")
        compiled, xids = None, frozenset()
        if pattern:
            if not isinstance(pattern, str):
                raise RuleError(f"{where}.pattern", "pattern must be a string")
            flags = re.IGNORECASE if entry.get("ignore_case") else 0
            admins = where.startswith("extra")
            if admins:  # an admin's rule: also safe to run on every log line (regex_safety), then time-limited below
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FutureWarning)  # (an ambiguous set is refused below, every time)
                    unsafe = regex_safety.problem(pattern, flags)
                if unsafe:
                    raise RuleError(f"{where}.pattern", unsafe)
            try:
                with warnings.catch_warnings():
                    # re's parser warns where a later Python (and the regex package, which runs admins' rules) reads
                    # the pattern otherwise: `[[:digit:]]` is a set of characters to re, a POSIX class to regex, so
                    # regex_safety would judge one pattern and regex run another (review 11, S3). The parser itself,
                    # not re.compile: compiled patterns are cached, and a cached one warns no more.
                    warnings.simplefilter("error", FutureWarning)
                    sre_parse.parse(pattern, flags)
                compiled = re.compile(pattern, flags)
                if admins:
                    compiled = regex.compile(pattern, flags)
            except FutureWarning as exc:
                raise RuleError(f"{where}.pattern", f"ambiguous: {exc} (escape a literal '[' as '\\[', or use a "
                                                     f"class such as \\d instead of [[:digit:]])") from None
            except (re.error, regex.error, RecursionError, OverflowError) as exc:
                raise RuleError(f"{where}.pattern", f"not a valid regular expression: {exc}") from None
            if entry.get("xids") is not None:
                if "xid" not in compiled.groupindex:
                    raise RuleError(f"{where}.xids", "xids needs a named group (?P<xid>...) in the pattern")
                try:
                    xids = frozenset(int(x) for x in entry["xids"])
                except (TypeError, ValueError):
                    raise RuleError(f"{where}.xids", "xids must be a list of integers") from None
        else:
            if not isinstance(when, Mapping) or not when or set(when) - {"exit_code", "signal"}:
                raise RuleError(f"{where}.when", "when must be a mapping of exit_code and/or signal")
            for k, v in when.items():
                vals = v if isinstance(v, (list, tuple)) else [v]
                if not vals or not all(isinstance(x, int) and not isinstance(x, bool) for x in vals):
                    raise RuleError(f"{where}.when.{k}", "must be an integer or a list of integers")
        rules.append(Rule(id=rid, category=category, action=action, source=source.strip(), pattern=compiled,
                          xids=xids, when=dict(when or {}), order=order,
                          limited=compiled is not None and where.startswith("extra")))
    return RuleSet(version=str(table.get("version", "")), rules=tuple(rules))


@dataclass(frozen=True)
class TaskEvidence:
    """One task of the attempt: `task` its label (role[index]), `node` its node name, `ended_at` when it
    ended (epoch seconds; None = still running / unknown: read last), its exit, whether it ended on its
    own (False: stopped by the platform after the gang's first failure), and its log tail as text."""

    task: str
    node: str | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    own_end: bool = True
    log: str = ""
    failed: bool = True
    log_offset: int = 0  # byte offset in the attempt's output where `log` starts


@dataclass(frozen=True)
class HealthEvidence:
    """A health event of one of the attempt's nodes: `category` is what the health rule named
    (gpu_hardware for fatal XIDs, ECC, NVLink...), `text` its message, `time` epoch seconds."""

    node: str
    text: str
    time: float
    category: str = "gpu_hardware"
    rule: str = ""


@dataclass
class Diagnosis:
    category: str
    summary: str
    action: str = "retry"
    evidence: list[dict] = field(default_factory=list)
    rule: str = ""
    node: str | None = None  # the node the cause points at (exclude_node acts on it)
    task: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _Match:
    rule: Rule
    task: TaskEvidence
    line_no: int | None
    text: str
    offset: int | None = None

    def key(self):
        return (PRECEDENCE.index(self.rule.category), self.rule.order, self.line_no or 0)


def _scan(task: TaskEvidence, rules: RuleSet) -> list[_Match]:
    found = []
    line_rules = rules.line_rules
    budget: dict[str, float] = {}  # admin rule id -> seconds of searching left in this log (RULE_LOG_SECONDS)
    offset = task.log_offset
    for i, line in enumerate(task.log.split("\n"), start=1):
        here, offset = offset, offset + len(line.encode("utf-8", "replace")) + 1
        line = line.rstrip("\r")
        if not line.strip():
            continue
        for rule in line_rules:
            if rule.limited:  # an admin's rule: LINE_SEARCH_SECONDS per line, RULE_LOG_SECONDS per log
                left = budget.get(rule.id, RULE_LOG_SECONDS)
                t0 = time.perf_counter()
                try:
                    hit = rule.match_line(line, min(LINE_SEARCH_SECONDS, left))
                except TimeoutError:
                    hit = False
                    if rule.id not in budget:
                        logger.warning("diagnosis rule %s took over %s s on line %d of task %s (%d characters): that "
                                       "line is skipped for it", rule.id, LINE_SEARCH_SECONDS, i, task.task, len(line))
                left = budget[rule.id] = left - (time.perf_counter() - t0)
                if left <= 0:
                    logger.warning("diagnosis rule %s spent its %s s on task %s's log by line %d and is skipped for "
                                   "the rest of it", rule.id, RULE_LOG_SECONDS, task.task, i)
                    line_rules = tuple(r for r in line_rules if r is not rule)
            else:
                hit = rule.match_line(line)
            if hit:
                found.append(_Match(rule, task, i, line.strip()[:MAX_LINE], here))
    return found


def log_matches(text: str, rules: RuleSet) -> bool:
    """Whether some line rule of `rules` matches a line of `text` (the search a diagnosis runs on a log tail)."""
    return bool(_scan(TaskEvidence(task="", log=text), rules))


def _ev(m: _Match) -> dict:
    return {"task": m.task.task, "source": "log", "line": m.line_no, "offset": m.offset, "text": m.text}


def _exit_ev(t: TaskEvidence) -> dict:
    from_exit = (f"killed by signal {t.signal}" if t.signal is not None else
                 f"exited with code {t.exit_code}" if t.exit_code is not None else "lost (no exit status)")
    return {"task": t.task, "source": "exit", "line": None, "text": from_exit}


def diagnose(tasks: Sequence[TaskEvidence], *, rules: RuleSet, health: Sequence[HealthEvidence] = (),
             platform: Mapping[str, str] | None = None) -> Diagnosis:
    """The root cause of one failed attempt (module docstring). `platform`: {"cause": cancelled |
    preempted | time_limit | gang_start_timeout | node_lost | agent_exited, "text": the platform's own message; for
    node_lost also "node": the lost node's name and "heartbeat": a line on its last heartbeat; for agent_exited
    "node": the node whose agent exited}, or None when the attempt ended because a task failed. node_lost and
    agent_exited (a node's fault: NODE_CAUSES) name their node, after a GPU hardware fault found in the evidence."""
    cause = (platform or {}).get("cause")
    ptext = (platform or {}).get("text", "")
    if cause and cause not in NODE_CAUSES:
        words = cause.replace("_", " ")  # the platform's text often starts with the cause already ("time limit of 3 s")
        summary = ptext if ptext.lower().startswith(words) else f"{words}: {ptext}" if ptext else words
        # what the lifecycle does next: a cancelled job never runs again and a time limit ends the job
        # (release.py: failed, no restart, as Slurm's TIMEOUT); preemption and a gang start timeout requeue it
        action = "cancel_retries" if cause in ("cancelled", "time_limit") else "retry"
        # the platform stopped it, but the limit is the user's own (the job's time_limit_seconds): the user's side
        category = USER_CAUSES.get(cause, "platform")
        return Diagnosis(category, summary,
                         action=action, evidence=[{"task": None, "source": "event", "line": None, "text": ptext or cause}],
                         rule=f"platform:{cause}")
    ordered = sorted(tasks, key=lambda t: (t.ended_at is None, t.ended_at or 0.0, t.task))
    matches = {t.task: sorted(_scan(t, rules), key=_Match.key) for t in ordered}

    hw_health = [h for h in health if h.category == "gpu_hardware"]
    hw_logs = [m for t in ordered for m in matches[t.task][:1] if m.rule.category == "gpu_hardware"]
    if hw_health or hw_logs:
        evidence = [{"task": None, "source": "health", "line": None, "text": f"{h.node}: {h.text}"[:MAX_LINE]}
                    for h in hw_health[:3]]
        evidence += [_ev(m) for m in hw_logs[:3]]
        if hw_logs:
            first = hw_logs[0]
            node, rule, action = first.task.node, first.rule.id, first.rule.action
            summary = f"GPU hardware fault on {node or 'its node'} ({first.task.task}): {first.text[:160]}"
        else:
            node, rule, action = hw_health[0].node, hw_health[0].rule or "health", "exclude_node"
            summary = f"GPU hardware fault on {node}: {hw_health[0].text[:160]}"
        task = hw_logs[0].task.task if hw_logs else None
        return Diagnosis("gpu_hardware", summary, action=action, evidence=evidence, rule=rule, node=node, task=task)
    if cause == "node_lost":  # the requeue reason already reads "node lost: 2 task(s) failed on n0"
        summary = ptext if ptext.lower().startswith("node lost") else f"node lost: {ptext}" if ptext else "node lost"
        evidence = [{"task": None, "source": "event", "line": None, "text": ptext or "node lost"}]
        if (platform or {}).get("heartbeat"):  # "n0: last heartbeat at 12:00:00" (the fault's time)
            evidence.append({"task": None, "source": "health", "line": None, "text": platform["heartbeat"][:MAX_LINE]})
        # the node lost is the fault's node (new-user trial 19, F4: it read None, and the failure page charged the
        # node with the user errors and OOMs of other attempts instead)
        return Diagnosis("platform", summary, action="retry", evidence=evidence, rule="platform:node_lost",
                         node=(platform or {}).get("node") or None)
    if cause == "agent_exited":  # the requeue reason reads "agent exited on n0: its node agent exited while ..."
        summary = ptext if ptext.lower().startswith("agent exited") else f"agent exited: {ptext}" if ptext else (
            "agent exited")
        evidence = [{"task": None, "source": "event", "line": None, "text": ptext or "agent exited"}]
        return Diagnosis("platform", summary, action="retry", evidence=evidence, rule="platform:agent_exited",
                         node=(platform or {}).get("node") or None)

    found = _by_class(ordered, matches, (ROOT_CATEGORIES, CONSEQUENCE_CATEGORIES))
    if found is None:
        found = _by_end(ordered, rules, unknown=False)
    if found is None:  # what is known without naming a cause: a line, then an end (a SIGKILL)
        found = _by_class(ordered, matches, (frozenset(("unknown",)),)) or _by_end(ordered, rules, unknown=True)
    if found is not None:
        return found
    failed = [t for t in ordered if t.failed]
    first = failed[0] if failed else (ordered[0] if ordered else None)
    if first is None:
        return Diagnosis("unknown", "no task evidence", action="retry")
    return Diagnosis("unknown", f"no rule matched; first task to fail: {first.task} {_exit_ev(first)['text']}",
                     action="retry", evidence=[_exit_ev(first)], node=first.node, task=first.task)


def _why(rule: Rule) -> str:
    """The first clause of an `unknown` rule's source: what is known and what is not confirmed."""
    return rule.source.split(";")[0][:300]


def _by_class(ordered, matches, classes) -> Diagnosis | None:
    for klass in classes:
        for t in ordered:
            ms = [m for m in matches[t.task] if m.rule.category in klass]
            if ms:
                best = ms[0]  # sorted by precedence, rule order, line
                same = [m for m in ms if m.rule.category == best.rule.category]
                evidence = [_ev(best)] + [_ev(m) for m in same[1:3] if m.text != best.text]
                evidence.append(_exit_ev(t))
                others = [m for u in ordered if u.task != t.task for m in matches[u.task][:1]]
                evidence += [_ev(m) for m in others[:2]]  # what the other ranks printed (consequences)
                where = f"{t.task}" + (f" on {t.node}" if t.node else "")
                summary = (f"{where}: {best.text[:200]} ({_why(best.rule)})" if best.rule.category == "unknown"
                           else f"{_label(best.rule.category)} in {where}: {best.text[:200]}")
                return Diagnosis(best.rule.category, summary, action=best.rule.action, evidence=evidence,
                                 rule=best.rule.id, node=t.node, task=t.task)
    return None


def _by_end(ordered, rules: RuleSet, *, unknown: bool) -> Diagnosis | None:
    """The first own end (not the platform's stop) meeting an end rule: the `unknown` ones or the others."""
    for t in ordered:
        if not t.own_end or not t.failed:
            continue
        for rule in rules.end_rules:
            if (rule.category == "unknown") == unknown and rule.match_end(t.exit_code, t.signal):
                summary = (f"{t.task} {_exit_ev(t)['text']}: {_why(rule)}" if unknown else
                           f"{_label(rule.category)} in {t.task}: {_exit_ev(t)['text']} ({rule.source.split(';')[0][:120]})")
                return Diagnosis(rule.category, summary, action=rule.action,
                                 evidence=[_exit_ev(t)], rule=rule.id, node=t.node, task=t.task)
    return None


LABELS = {"cuda_oom": "CUDA out of memory", "nccl_timeout": "NCCL collective timeout",
          "nccl_network": "NCCL network error", "gpu_hardware": "GPU hardware fault", "cuda_error": "CUDA error",
          "nan_loss": "loss became NaN/inf", "host_oom": "host out of memory", "user_error": "error in the job's code or configuration",
          "storage": "storage error", "platform": "stopped by the platform", "cancelled": "cancelled on request",
          "unknown": "unknown cause"}


def _label(category: str) -> str:
    return LABELS.get(category, category)


# ----------------------------------------------------------------------------------------- health rules
_OPS = {
    "any": lambda got, v: bool(got),
    "gt": lambda got, v: got is not None and not isinstance(got, (list, tuple)) and got > v,
    "ge": lambda got, v: got is not None and not isinstance(got, (list, tuple)) and got >= v,
    "eq": lambda got, v: got == v,
    "in": lambda got, v: bool(set(got if isinstance(got, (list, tuple, set)) else [got]) & set(v)),
}


@dataclass(frozen=True)
class HealthRule:
    """signal `op` value -> action. ops: any (truthy), gt, ge, eq, in (an XID list meets a set)."""

    id: str
    signal: str
    op: str
    value: Any
    action: str
    source: str
    category: str = "gpu_hardware"
    order: int = 0

    def matches(self, signals: Mapping[str, Any]) -> bool:
        if self.signal not in signals:
            return False
        return _OPS[self.op](signals[self.signal], self.value)


# What each signal counts (HEALTH_SIGNALS): none is ever negative, so a rule comparing one with a value below 0
# is refused (a rule that can never fire, or always fires, is a mistake, not a rule; admin report, session 27).
HEALTH_SIGNAL_UNITS = {"xid": "an XID number", "ecc_dbe_volatile": "a count of errors",
                       "row_remap_failure": "true/false (a count of 0 or 1)",
                       "thermal_slowdown_seconds": "a duration in seconds", "power_slowdown_seconds": "a duration in seconds",
                       "nvlink_down": "a count of links", "heartbeat_lost_seconds": "a duration in seconds",
                       "gpu_missing": "a count of GPUs", "repeat_offender_jobs": "a count of jobs"}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def health_rule_problems(e: Mapping) -> dict[str, str]:
    """Every problem of a health rule entry's signal, op, action, category and value at once ({field: message},
    in that order; {} when none): parse_health_rules raises the first, the API and services.save_health_rule
    name them all. A field that is None is judged as absent. `gt` / `ge` take a number (not true/false; "default"
    for heartbeat_lost_seconds), `in` a non-empty list of whole numbers, and no number compared with a signal
    (a count, a duration, an XID number) is below 0."""
    problems: dict[str, str] = {}
    signal, op, value = e.get("signal"), e.get("op"), e.get("value")
    if signal not in HEALTH_SIGNALS:
        problems["signal"] = f"signal must be one of {', '.join(HEALTH_SIGNALS)}"
        signal = None
    if op not in _OPS:
        problems["op"] = f"op must be one of {', '.join(_OPS)}"
    if e.get("action") not in HEALTH_ACTIONS:
        problems["action"] = f"action must be one of {', '.join(HEALTH_ACTIONS)}"
    category = e.get("category") or "gpu_hardware"
    if category not in CATEGORIES or category == "cancelled":  # a health signal is never a cancel
        problems["category"] = "category must be one of " + ", ".join(c for c in CATEGORIES if c != "cancelled")
    heartbeat = signal == "heartbeat_lost_seconds"
    if op == "in":
        if not (isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                          for v in value)):
            problems["value"] = ("op 'in' needs a non-empty list of whole numbers, e.g. [48, 79]"
                                 + (" (an empty list never matches)" if value == [] else ""))
    elif op in ("gt", "ge") and not _is_number(value) and not (heartbeat and value == "default"):
        problems["value"] = f"op {op!r} needs a number" + (
            ", not true/false" if isinstance(value, bool) else "") + (
            " (or \"default\": the platform's heartbeat settings)" if heartbeat else "")
    if "value" not in problems and op in ("gt", "ge", "eq", "in") and signal is not None:
        below = [v for v in (value if op == "in" and isinstance(value, list) else [value])
                 if _is_number(v) and v < 0]
        if below:
            problems["value"] = (f"{signal} is {HEALTH_SIGNAL_UNITS[signal]}, never below 0: "
                                 f"a value of {below[0]} is not one (give 0 or more)")
    return problems


def parse_health_rules(table: Mapping, extra: Iterable[Mapping] = ()) -> tuple[str, tuple[HealthRule, ...]]:
    """(version, rules) from {"version", "rules": [{id, signal, op, value, action, source, category?}]}
    plus `extra` entries. A `heartbeat_lost_seconds` rule may have value "default": the platform resolves
    it from its settings (gpuplatform.scheduling.failures.heartbeat_rules). Raises RuleError naming the
    entry and key."""
    out, seen = [], set()
    for order, (where, e) in enumerate(_entries(table, extra)):
        rid, source, category, action = _check_common(e, where, seen)
        problems = health_rule_problems(e)
        if problems:
            key, message = next(iter(problems.items()))
            raise RuleError(f"{where}.{key}", message)
        value, category = e.get("value"), category or "gpu_hardware"
        out.append(HealthRule(rid, e["signal"], e["op"], value, action, source.strip(), category, order))
    return str(table.get("version", "")), tuple(out)


def evaluate_health(signals: Mapping[str, Any], rules: Sequence[HealthRule]) -> list[HealthRule]:
    """The rules `signals` meets, in table order. Signals absent from the dict are not judged."""
    return [r for r in rules if r.matches(signals)]


ACTION_WEIGHT = {"record": 0, "cordon": 1, "drain": 2, "fail_tasks": 3}


def strongest(actions: Iterable[str]) -> str | None:
    """The strongest of several health actions (fail_tasks > drain > cordon > record), None if none."""
    acts = list(actions)
    return max(acts, key=ACTION_WEIGHT.__getitem__) if acts else None
