"""Is a user-supplied regular expression safe to run on every log line? (pure: stdlib only)

Python's `re` backtracks: a pattern such as `(a+)+$` takes time exponential in the length of a line of a's
followed by another character, and `(.*a){20}` polynomial of degree 20, so one admin's diagnosis rule could
hang every failed job's diagnosis. `problem(pattern)` returns the rule a pattern breaks, or None:

- at most MAX_PATTERN_CHARS characters and groups nested at most MAX_DEPTH deep;
- it compiles (re.error, and the RecursionError / OverflowError that very deep nesting or a huge repeat
  count raise, are all "not a valid regular expression");
- no repeated part (a quantifier whose maximum is above 1: `*`, `+`, `{2,}`, `{20}`) contains another
  variable quantifier (`(a+)+`, `(\\w+\\s?)*`, `(.*a){20}`);
- no repeated part contains alternatives, or an optional piece, that can start with the same character as
  another alternative (`(a|aa)+`, `(a|a?)+`, `(ab?)+`): judged by first characters, so it refuses some
  patterns that are in fact safe; `(?:foo|bar)+` (different first characters) is accepted.

An atomic group `(?>...)` or a possessive quantifier (`a++`, `a*+`) never backtracks into its body, so what
it contains is not judged: `(?>a+)+$` is accepted. The check is a static judgement of the pattern, not a
proof: polynomial patterns of adjacent repeats (`\\w*\\w*x`) pass it.
"""
from __future__ import annotations

import re
import re._constants as C  # noqa: N812
import re._parser as sre_parse

__all__ = ["MAX_PATTERN_CHARS", "MAX_DEPTH", "problem"]

MAX_PATTERN_CHARS = 2000
MAX_DEPTH = 50
_ANY = None  # a first-character set that may hold any character
_RANGE_CAP = 512  # a class wider than this counts as any character
_REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT)


class _Unsafe(Exception):
    pass


def problem(pattern: str, flags: int = 0) -> str | None:
    """The rule `pattern` breaks (a sentence for a 400), or None when it is acceptable."""
    if not isinstance(pattern, str):
        return "a pattern is a string"
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"a pattern is at most {MAX_PATTERN_CHARS} characters (this one has {len(pattern)})"
    depth = 0
    deepest = 0
    escaped = False
    for ch in pattern:  # a cheap bound before the recursive parser sees it
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth -= 1
    if deepest > MAX_DEPTH:
        return f"not a valid regular expression here: groups are nested at most {MAX_DEPTH} deep"
    try:
        re.compile(pattern, flags)
        parsed = sre_parse.parse(pattern, flags)
    except re.error as exc:
        return f"not a valid regular expression: {exc}"
    except (RecursionError, OverflowError, ValueError, MemoryError) as exc:
        return f"not a valid regular expression: {exc}"
    try:
        _walk(list(parsed), loop=False)
    except _Unsafe as exc:
        return str(exc)
    except RecursionError:
        return f"not a valid regular expression here: groups are nested at most {MAX_DEPTH} deep"
    return None


def _walk(seq, *, loop: bool) -> None:
    """Raise _Unsafe when something inside a repeated part (`loop`) can match the same text two ways."""
    for op, av in seq:
        if op in _REPEATS:
            lo, hi, body = av
            variable = lo != hi
            if loop and variable:
                raise _Unsafe("a repeated part contains another repeat (e.g. (a+)+ or (.*a){20}): such a pattern "
                              "can take exponential time on one log line; remove the inner quantifier, or make it "
                              "atomic (?>...) or possessive (a++)")
            if loop and hi == 1 and lo == 0:
                _ambiguous([list(body), []])
            _walk(list(body), loop=loop or hi > 1)
        elif op is C.POSSESSIVE_REPEAT or op is C.ATOMIC_GROUP:
            continue  # never backtracks into its body
        elif op is C.SUBPATTERN:
            _walk(list(av[3]), loop=loop)
        elif op is C.BRANCH:
            alternatives = [list(alt) for alt in av[1]]
            if loop:
                _ambiguous(alternatives)
            for alt in alternatives:
                _walk(alt, loop=loop)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            _walk(list(av[1]), loop=False)  # a look-around runs once per position; its own loops are judged alone
        elif op is C.GROUPREF_EXISTS:
            _cond, yes, no = av
            _walk(list(yes), loop=loop)
            if no is not None:
                _walk(list(no), loop=loop)


def _ambiguous(alternatives: list[list]) -> None:
    firsts = []
    for alt in alternatives:
        chars, nullable = _first(alt)
        firsts.append(_ANY if nullable else chars)
    for i in range(len(firsts)):
        for j in range(i + 1, len(firsts)):
            a, b = firsts[i], firsts[j]
            if a is _ANY or b is _ANY or a & b:
                raise _Unsafe("a repeated part contains alternatives (or an optional piece) that can match the same "
                              "text (e.g. (a|aa)+ or (a|a?)+): such a pattern can take exponential time on one log "
                              "line; make the alternatives start differently, or the group atomic (?>...)")


def _fold(code: int) -> set[int]:
    ch = chr(code)
    return {code, ord(ch.lower()[0]), ord(ch.upper()[0])}


def _first(seq) -> tuple[set[int] | None, bool]:
    """(the characters a match of `seq` can start with, or _ANY; whether it can match the empty string)."""
    out: set[int] = set()
    for op, av in seq:
        chars, nullable = _first_item(op, av)
        if chars is _ANY:
            return _ANY, True
        out |= chars
        if not nullable:
            return out, False
    return out, True


def _first_item(op, av) -> tuple[set[int] | None, bool]:
    if op is C.LITERAL:
        return _fold(av), False
    if op is C.IN:
        chars: set[int] = set()
        for kind, value in av:
            if kind is C.LITERAL:
                chars |= _fold(value)
            elif kind is C.RANGE and value[1] - value[0] <= _RANGE_CAP:
                for code in range(value[0], value[1] + 1):
                    chars |= _fold(code)
            else:  # NEGATE, CATEGORY, a wide range
                return _ANY, False
        return chars, False
    if op in _REPEATS or op is C.POSSESSIVE_REPEAT:
        lo, _hi, body = av
        chars, nullable = _first(list(body))
        return chars, nullable or lo == 0
    if op is C.SUBPATTERN:
        return _first(list(av[3]))
    if op is C.ATOMIC_GROUP:
        return _first(list(av))
    if op is C.BRANCH:
        out: set[int] = set()
        any_nullable = False
        for alt in av[1]:
            chars, nullable = _first(list(alt))
            if chars is _ANY:
                return _ANY, True
            out |= chars
            any_nullable = any_nullable or nullable
        return out, any_nullable
    if op in (C.AT, C.ASSERT, C.ASSERT_NOT):
        return set(), True  # zero width
    return _ANY, True  # ANY, NOT_LITERAL, GROUPREF, GROUPREF_EXISTS, CATEGORY ...: anything
