"""Is a user-supplied regular expression safe to run on every log line? (pure: stdlib only)

Python's `re` backtracks: a pattern such as `(a+)+$` takes time exponential in the length of a line of a's
followed by another character, and `(.*a){20}` polynomial of degree 20, so one admin's diagnosis rule could
hang every failed job's diagnosis. `problem(pattern)` returns the rule a pattern breaks, or None:

- at most MAX_PATTERN_CHARS characters and groups nested at most MAX_DEPTH deep (a `(` inside a class `[(]`
  is a character, not a group);
- it compiles (re.error, and the RecursionError / OverflowError that very deep nesting or a huge repeat
  count raise, are all "not a valid regular expression");
- a repeated part (a quantifier whose maximum is above 1: `*`, `+`, `{2,}`, `{20}`) can split a text into
  its repetitions one way only. Judged by characters, one character ahead: wherever the engine has a choice
  inside the repeated part (repeat once more or stop, take an optional piece or skip it, one alternative or
  another), the choices must start with different characters, counting what follows the choice inside the
  part and, at its end, the next repetition. So `(?:\\d+\\.)+\\d+` (a version), `(\\d{1,3}\\.){3}` (an IPv4
  address), `(\\[[^\\]]*\\])+` (bracketed fields), `(ab?)+` and `(?:foo|bar)+` are accepted: each repetition
  ends with a character its variable part cannot match, or its alternatives start differently; and `(a+)+`,
  `(\\w+\\s?)*`, `(.*a){20}`, `(\\w*\\w*)+`, `(a|aa)+`, `(a|a)*`, `(?:a|a?)+` are refused. A bounded repeat
  not inside another one (`(?:\\w{1,3}){3}`) is also accepted when the ways it can match at one place are few
  (at most MAX_BOUNDED_PATHS for all such repeats of the pattern together).
- an atomic group `(?>...)` or a possessive quantifier (`a++`, `(?:...)*+`) matches one way once it has
  matched, so for the repeat around it it is one piece with no choice (`(?>a+)+$`, `(a++)+$`, `(?>ab|a)+`
  are accepted); but while it looks for that match its body backtracks as usual, so the body is judged as a
  pattern of its own (`(?>(a+)+b)` and `(?:(a+)+b)*+` are refused). A look-around's body likewise.

- adjacent unbounded repeats (`+`, `*`, `{n,}`) that can match the same characters, with only optional pieces
  between them (`\\s*`, `-?`, an anchor), may split one run of characters between them in many ways: k of them
  in a row try some n^(k-1) splits of a run of n before a later piece fails. Two in a row (`\\w*\\w*x`, n^2) are
  accepted; three or more (`\\d+\\s*\\d+\\s*\\d+x`, cubic) are refused (new-user trial 10, F2). A required piece
  between them that the repeats cannot match (`\\d+\\s+\\d+\\s+\\d+`, `\\d+,\\d+,\\d+`, `.*x.*y.*z`), a
  bounded repeat (`\\d{1,6}`) or a possessive one (`\\d++`) ends the run. A group holding just one repeat
  (`(\\d+)`) counts as that repeat.

Alternatives are judged as written. re's parser moves a prefix all of them share out of the alternation and
merges one-character alternatives into a set (`(a|ab)*c` is parsed as `(a(?:|b))*c`, `(a|[ab])+` as `([ab])+`),
so the pattern is read here by a private copy of that parser which keeps each alternation as it is
(`_as_written`): `(a|ab)*c`, `(?:ab|ac)+` and `(a|[ab])+` are refused like `(a|a)*b` (new-user trial 25, B: `(a|ab)*c`
was accepted, and took 30 s on a line of 30,000 a's with re.search).

The check is a static judgement of the pattern, not a proof: it refuses some safe patterns (`(?:ab|a)+`, whose
alternatives start alike: write `(?>ab|a)+` or `(?:ab?)+`), and polynomial patterns that are not a run of
adjacent repeats (`\\w+a\\w+a\\w+b`, whose repeats are separated by a character they match) pass it. An admin's
rule is also searched with a time limit (diagnosis/engine.py, LINE_SEARCH_SECONDS of the search's CPU time per line):
a quadratic search that passes this check, such as `(?:ab?)*c` on a long line of a's, is cut off there.
"""
from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
import re._constants as C  # noqa: N812
import re._parser as sre_parse

try:
    from re._casefix import _EXTRA_CASES  # Python 3.11+: characters that match each other under IGNORECASE
except ImportError:  # pragma: no cover
    _EXTRA_CASES = {}

__all__ = ["MAX_PATTERN_CHARS", "MAX_DEPTH", "MAX_BOUNDED_PATHS", "problem"]

MAX_PATTERN_CHARS = 2000
MAX_DEPTH = 50
MAX_BOUNDED_PATHS = 256  # the ways bounded repeats with a choice may match at one place, all together
_RANGE_CAP = 512  # a class range wider than this is not listed (counts as any character, or as excluding none)
_REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT)
_INF = float("inf")

REPEAT_RULE = ("a repeated part contains another repeat or an optional piece that can match the same characters "
               "as what follows it (e.g. (a+)+, (\\w+\\s?)* or (.*a){20}): such a pattern can take exponential "
               "time on one log line; end each repetition with a character the inner repeat cannot match "
               "(e.g. (?:\\d+\\.)+), bound it (e.g. (?:\\d{1,3}\\.){3}), or make the inner part atomic (?>...) or "
               "possessive (a++)")
ALTERNATIVES_RULE = ("a repeated part contains alternatives that can start with the same character (e.g. (a|aa)+ "
                     "or (a|a?)+): such a pattern can take exponential time on one log line; make the "
                     "alternatives start differently, or the group atomic (?>...)")

CHAIN_RULE = ("three or more unbounded repeats in a row can match the same characters with only optional pieces "
              "between them (e.g. \\d+\\s*\\d+\\s*\\d+x): such a pattern can take polynomial time (cubic or worse) on "
              "one log line; separate them with a required character they cannot match (e.g. \\d+\\s+\\d+), bound "
              "them (e.g. \\d{1,6}), or make them possessive (\\d++)")
MAX_CHAIN = 2  # adjacent overlapping unbounded repeats allowed in a row (two: quadratic at worst)


class _Unsafe(Exception):
    pass


def problem(pattern: str, flags: int = 0) -> str | None:
    """The rule `pattern` breaks (a sentence for a 400), or None when it is acceptable."""
    if not isinstance(pattern, str):
        return "a pattern is a string"
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"a pattern is at most {MAX_PATTERN_CHARS} characters (this one has {len(pattern)})"
    if _nesting(pattern) > MAX_DEPTH:
        return f"not a valid regular expression here: groups are nested at most {MAX_DEPTH} deep"
    try:
        re.compile(pattern, flags)
        parsed = _as_written.parse(pattern, flags)
    except re.error as exc:
        return f"not a valid regular expression: {exc}"
    except (RecursionError, OverflowError, ValueError, MemoryError) as exc:
        return f"not a valid regular expression: {exc}"
    judge = _Judge(ascii_only=bool(parsed.state.flags & C.SRE_FLAG_ASCII))
    try:
        judge.walk(list(parsed), _EMPTY, loop=False)
    except _Unsafe as exc:
        return str(exc)
    except RecursionError:
        return f"not a valid regular expression here: groups are nested at most {MAX_DEPTH} deep"
    return None


def _parser_as_written():
    """A private copy of re's parser (re._parser, not the one re uses) whose alternations stay as written: its
    `_parse_sub` neither moves the alternatives' common prefix out (`a|ab` -> `a(?:|b)`) nor merges one-character
    alternatives into a set (`a|a` -> `[a]`), so the judgement sees the alternatives the admin wrote (module
    docstring). Everything else is re's own code; the constants are re's (the same objects)."""
    spec = importlib.util.find_spec("re._parser")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def _parse_sub(source, state, verbose, nested):
        items = []
        while True:
            items.append(module._parse(source, state, verbose, nested + 1, not nested and not items))
            if not source.match("|"):
                break
            if not nested:
                verbose = state.flags & C.SRE_FLAG_VERBOSE
        if len(items) == 1:
            return items[0]
        subpattern = module.SubPattern(state)
        subpattern.append((C.BRANCH, (None, items)))
        return subpattern

    module._parse_sub = _parse_sub
    return module


_as_written = _parser_as_written()


def _nesting(pattern: str) -> int:
    """How deep the groups of `pattern` nest (a cheap bound before the recursive parser sees it): a `(` escaped
    or inside a character class is not a group."""
    depth = deepest = 0
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
        elif ch == "[":
            in_class = True
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":  # `[]...]` and `[^]...]`: a leading ] is a character
                i += 1
            continue
        elif ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth -= 1
        i += 1
    return deepest


# --- sets of characters ---------------------------------------------------------------------------------------

_CATEGORY_RE = {"digit": re.compile(r"\d"), "word": re.compile(r"\w"), "space": re.compile(r"\s")}
_ASCII_CATEGORY = {
    "digit": frozenset(range(48, 58)),
    "word": frozenset([*range(48, 58), *range(65, 91), *range(97, 123), 95]),
    "space": frozenset([9, 10, 11, 12, 13, 32]),
}
_CATEGORIES = {
    C.CATEGORY_DIGIT: ("digit", False), C.CATEGORY_NOT_DIGIT: ("digit", True),
    C.CATEGORY_WORD: ("word", False), C.CATEGORY_NOT_WORD: ("word", True),
    C.CATEGORY_SPACE: ("space", False), C.CATEGORY_NOT_SPACE: ("space", True),
}


def _in_category(code: int, cat: str) -> bool:
    return _CATEGORY_RE[cat].match(chr(code)) is not None


def _category_within(a: str, b: str) -> bool:
    return a == b or (a == "digit" and b == "word")  # (checked over all of Unicode)


def _categories_disjoint(a: str, b: str) -> bool:
    return a != b and "space" in (a, b)  # \s meets neither \d nor \w (checked over all of Unicode)


class _Chars:
    """A set of characters: `codes` and Unicode categories `cats` ("digit", "word", "space"), or, when `neg`,
    every character but those. Built to over-approximate: a set may hold more than the pattern can match
    there, never less, so "these two sets are disjoint" is only ever answered when it is true."""

    __slots__ = ("neg", "codes", "cats")

    def __init__(self, codes=frozenset(), cats=frozenset(), neg=False):
        self.neg = neg
        self.codes = frozenset(codes)
        self.cats = frozenset(cats)

    def _listed(self, code: int) -> bool:
        return code in self.codes or any(_in_category(code, cat) for cat in self.cats)

    def _lists_category(self, cat: str) -> bool:
        return any(_category_within(cat, mine) for mine in self.cats)

    def _misses_category(self, cat: str) -> bool:
        return (all(_categories_disjoint(cat, mine) for mine in self.cats)
                and not any(_in_category(code, cat) for code in self.codes))

    def meets(self, other: _Chars) -> bool:
        """Whether the two sets may share a character."""
        a, b = self, other
        if a.neg and b.neg:
            return True
        if a.neg:
            a, b = b, a
        if not b.neg:  # both listed
            if a.codes & b.codes or any(b._listed(code) for code in a.codes):
                return True
            if any(a._listed(code) for code in b.codes):
                return True
            return any(not _categories_disjoint(x, y) for x in a.cats for y in b.cats)
        # a listed, b all but a list: they meet unless everything in a is on b's list
        return not (all(b._listed(code) for code in a.codes) and all(b._lists_category(cat) for cat in a.cats))

    def __or__(self, other: _Chars) -> _Chars:
        a, b = self, other
        if not a.neg and not b.neg:
            return _Chars(a.codes | b.codes, a.cats | b.cats)
        if a.neg and b.neg:  # all but (what both exclude)
            codes = {c for c in a.codes if b._listed(c)} | {c for c in b.codes if a._listed(c)}
            cats = {c for c in a.cats if b._lists_category(c)} | {c for c in b.cats if a._lists_category(c)}
            return _Chars(codes, cats, neg=True)
        if not a.neg:
            a, b = b, a
        # all but a's list, plus b's characters: a category b touches leaves the list whole (more, never less)
        return _Chars({c for c in a.codes if not b._listed(c)}, {c for c in a.cats if b._misses_category(c)},
                      neg=True)

    def __bool__(self) -> bool:
        return self.neg or bool(self.codes) or bool(self.cats)


_EMPTY = _Chars()
_ANY = _Chars(neg=True)


@lru_cache(maxsize=4096)
def _fold(code: int) -> frozenset[int]:
    """`code` and the characters that match it when case is ignored (always counted: more, never less)."""
    out = {code}
    ch = chr(code)
    for variant in (ch.lower(), ch.upper()):
        out.update(ord(v) for v in variant)
    for c in list(out):
        out.update(_EXTRA_CASES.get(c, ()))
    return frozenset(out)


def _category(cat: str, inverted: bool, ascii_only: bool) -> _Chars:
    if ascii_only:
        return _Chars(_ASCII_CATEGORY[cat], neg=inverted)
    return _Chars(cats={cat}, neg=inverted)


@lru_cache(maxsize=1024)
def _class_chars(items: tuple, ascii_only: bool) -> _Chars:
    """The characters of a class `[...]` (parsed items), over-approximated (_Chars). Cached: a pattern's walk asks
    for the same class's set again at every level."""
    negate = bool(items) and items[0][0] is C.NEGATE
    if negate:
        items = items[1:]
    out = _EMPTY
    for kind, value in items:
        if kind is C.LITERAL:
            part = _Chars({value} if negate else _fold(value))
        elif kind is C.RANGE:
            lo, hi = value
            if hi - lo > _RANGE_CAP:
                if negate:
                    continue  # excluding fewer characters than the class does: more, never less
                return _ANY
            codes: set[int] = set(range(lo, hi + 1))
            if not negate:
                for code in range(lo, hi + 1):
                    codes |= _fold(code)
            part = _Chars(codes)
        elif kind is C.CATEGORY and value in _CATEGORIES:
            part = _category(*_CATEGORIES[value], ascii_only)
        else:  # anything else: any character (a negated class: excludes none)
            if negate:
                continue
            return _ANY
        out = out | part
    if negate:
        return _ANY if out.neg else _Chars(out.codes, out.cats, neg=True)
    return out


# --- the judgement -------------------------------------------------------------------------------------------

class _Judge:
    def __init__(self, *, ascii_only: bool):
        self.ascii_only = ascii_only
        self.bounded_paths = 1  # the product of the ways of the bounded repeats accepted by their count

    # what a piece can start with

    def _class(self, items) -> _Chars:
        return _class_chars(tuple(items), self.ascii_only)

    def first(self, seq) -> tuple[_Chars, bool]:
        """(the characters a match of `seq` can start with, whether it can match the empty string)."""
        out = _EMPTY
        for op, av in seq:
            chars, nullable = self.first_item(op, av)
            out = out | chars
            if not nullable:
                return out, False
        return out, True

    def first_item(self, op, av) -> tuple[_Chars, bool]:
        if op is C.LITERAL:
            return _Chars(_fold(av)), False
        if op is C.NOT_LITERAL:
            return _Chars({av}, neg=True), False
        if op is C.IN:
            return self._class(av), False
        if op is C.ANY:
            return _ANY, False
        if op in _REPEATS or op is C.POSSESSIVE_REPEAT:
            lo, hi, body = av
            if hi == 0:
                return _EMPTY, True
            chars, nullable = self.first(body)
            return chars, nullable or lo == 0
        if op is C.SUBPATTERN:
            return self._flagged(av, lambda: self.first(av[3]))
        if op is C.ATOMIC_GROUP:
            return self.first(av)
        if op is C.BRANCH:
            out, any_nullable = _EMPTY, False
            for alt in av[1]:
                chars, nullable = self.first(alt)
                out = out | chars
                any_nullable = any_nullable or nullable
            return out, any_nullable
        if op is C.GROUPREF_EXISTS:
            _cond, yes, no = av
            chars, nullable = self.first(yes)
            other, other_nullable = self.first(no) if no is not None else (_EMPTY, True)
            return chars | other, nullable or other_nullable
        if op in (C.AT, C.ASSERT, C.ASSERT_NOT):
            return _EMPTY, True  # zero width: what follows comes first
        return _ANY, True  # GROUPREF and anything unknown: any character, or none

    def _flagged(self, av, then):
        """Run `then` with the local flags of a group `(?a:...)` in force."""
        saved = self.ascii_only
        if av[1] & C.SRE_FLAG_ASCII:
            self.ascii_only = True
        try:
            return then()
        finally:
            self.ascii_only = saved

    # the walk

    def walk(self, seq, after: _Chars, *, loop: bool) -> None:
        """Judge `seq`; `after`: what may follow it inside the repeated part it is in (`loop`), up to and
        including the next repetition's start (the part's exit is not counted: a repeat that ends is one
        choice for the whole text, not one per repetition)."""
        seq = list(seq)
        self._chain(seq)
        follows = []
        following = after
        for op, av in reversed(seq):
            follows.append(following)
            chars, nullable = self.first_item(op, av)
            following = chars | following if nullable else chars
        follows.reverse()
        for (op, av), then in zip(seq, follows):
            self.item(op, av, then, loop=loop)

    def _chain(self, seq) -> None:
        """Refuse a run of more than MAX_CHAIN adjacent unbounded repeats whose characters overlap, with only
        optional pieces between them (module docstring; CHAIN_RULE)."""
        run, last = 0, None
        for op, av in seq:
            chars, nullable = self.first_item(op, av)
            if _unbounded(op, av):
                if last is not None and chars.meets(last):
                    run += 1
                elif nullable and last is not None:
                    continue  # an optional separator the run's characters do not meet (\s* between \d+)
                else:
                    run = 1
                last = chars
                if run > MAX_CHAIN:
                    raise _Unsafe(CHAIN_RULE)
            elif not nullable:
                run, last = 0, None  # a required piece ends the run
            # else: an optional piece (x?, an anchor, a look-around) between two repeats keeps the run

    def item(self, op, av, after: _Chars, *, loop: bool) -> None:
        if op in _REPEATS:
            lo, hi, body = av
            if hi == 0:
                return
            chars, nullable = self.first(body)
            if loop and lo != hi:  # once more, or on to what follows
                again = chars | after if nullable else chars
                if nullable or again.meets(after):
                    raise _Unsafe(REPEAT_RULE)
            if loop:
                self.walk(body, chars | after if hi > 1 else after, loop=True)
            elif hi > 1:
                self._repeat(body, chars, lo, hi)
            else:
                self.walk(body, _EMPTY, loop=False)
        elif op is C.POSSESSIVE_REPEAT:
            # a possessive repeat never gives back a repetition: each is found as an atomic group's body is,
            # backtracking only inside itself
            self.walk(av[2], _EMPTY, loop=False)
        elif op is C.ATOMIC_GROUP:
            self.walk(av, _EMPTY, loop=False)  # one match for what is around it; its body searches on its own
        elif op in (C.ASSERT, C.ASSERT_NOT):
            self.walk(av[1], _EMPTY, loop=False)  # runs at each position on its own
        elif op is C.SUBPATTERN:
            self._flagged(av, lambda: self.walk(av[3], after, loop=loop))
        elif op is C.BRANCH:
            alternatives = [list(alt) for alt in av[1]]
            if loop:
                starts = []
                for alt in alternatives:
                    chars, nullable = self.first(alt)
                    starts.append((chars | after if nullable else chars, nullable))
                for i, (a, a_nullable) in enumerate(starts):
                    for b, b_nullable in starts[i + 1:]:
                        if (a_nullable and b_nullable) or a.meets(b):
                            raise _Unsafe(ALTERNATIVES_RULE)
            for alt in alternatives:
                self.walk(alt, after, loop=loop)
        elif op is C.GROUPREF_EXISTS:
            _cond, yes, no = av  # decided by an earlier group, not by backtracking
            self.walk(yes, after, loop=loop)
            if no is not None:
                self.walk(no, after, loop=loop)

    def _repeat(self, body, chars: _Chars, lo: int, hi: int) -> None:
        """A repeat not inside another: its repetitions must split a text one way (the next repetition follows
        each one), or, bounded, it may match only a few ways at one place."""
        try:
            self.walk(body, chars, loop=True)
        except _Unsafe:
            if hi >= C.MAXREPEAT:
                raise
            paths = _repeat_paths(lo, hi, _paths(body))
            self.bounded_paths *= paths
            if self.bounded_paths > MAX_BOUNDED_PATHS:
                raise
            self.walk(body, _EMPTY, loop=False)


def _unbounded(op, av) -> bool:
    """An unbounded greedy or lazy repeat (`+`, `*`, `{n,}`), or a group holding just one."""
    while op is C.SUBPATTERN and len(av[3]) == 1:
        op, av = av[3][0]
    return op in _REPEATS and av[1] >= C.MAXREPEAT


def _paths(seq) -> float:
    """How many ways `seq` may try at one place (an upper bound; _INF when unbounded or over the cap)."""
    total = 1.0
    for op, av in seq:
        if op in _REPEATS:
            lo, hi, body = av
            ways = _INF if hi >= C.MAXREPEAT else _repeat_paths(lo, hi, _paths(body))
        elif op is C.SUBPATTERN:
            ways = _paths(av[3])
        elif op is C.BRANCH:
            ways = sum(_paths(alt) for alt in av[1])
        elif op is C.GROUPREF_EXISTS:
            ways = _paths(av[1]) + (_paths(av[2]) if av[2] is not None else 1)
        else:  # one way: a character, an anchor, an atomic group, a possessive repeat, a look-around
            ways = 1
        total *= ways
        if total > MAX_BOUNDED_PATHS:
            return _INF
    return total


def _repeat_paths(lo: int, hi: int, body: float) -> float:
    if body == _INF:
        return _INF
    if body == 1:
        return hi - lo + 1 if hi - lo < MAX_BOUNDED_PATHS else _INF
    total = 0.0
    for count in range(lo, hi + 1):
        total += body ** count
        if total > MAX_BOUNDED_PATHS:
            return _INF
    return total
