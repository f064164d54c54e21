"""The one name rule of the platform: jobs, roles, queues, teams and nodes, for the form, the API, the admin, the
importers and the services alike (issue 13: the API accepted `<script>...` and `jöb` that the form refused; new-user
trial 13, F2: a node registered as `../../etc/x y` was ready and took jobs, but no per-node URL could name it, so it
could never be cordoned or drained).

A name is ASCII letters, digits, '.', '_' and '-', starting with a letter or digit, and at most a length
that depends on the column. The form gives NAME_PATTERN to the browser as the input's `pattern`. The refusal says
"ASCII letters" and names a character outside them ('é' is a letter, but not an ASCII one: break-it trial 20, F6,
"jöb" was refused as if 'ö' were no letter). Names are unique as written, except team and queue names, which are
compared by their canonical key (models.tenancy.canonical_key: letter case and '.', '_', '-' ignored;
services.tenancy, services.queues.QUEUE_NAME_RULE: trial 21, F9), and node names, host names, compared without letter
case (services.nodes.NODE_NAME_RULE).
"""
from __future__ import annotations

import re
import unicodedata

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._\-]*"
NAME_RE = re.compile(f"^{NAME_PATTERN}\\Z")  # \Z, not $: "$" also matches before a final newline ("abc\n")
NAME_HELP = "only ASCII letters (A-Z, a-z), digits (0-9), '.', '_' and '-', starting with a letter or digit"
MAX_CHARS = {"job": 200, "role": 64, "queue": 100, "team": 100, "node": 200}


def name_error(kind: str, value) -> str | None:
    """The message for a `kind` ("job", "role", "queue", "team", "node") name that breaks the rule, naming the rule
    (empty, too long, or characters), or None for a good name. Callers key it by their field ("name",
    "roles[0].name")."""
    limit = MAX_CHARS[kind]
    if not isinstance(value, str) or not value.strip():
        return f"a {kind} name must not be empty"
    if not NAME_RE.match(value):
        return f"a {kind} name uses {NAME_HELP} ({value[:40]!r} does not{_why(value)})"
    if len(value) > limit:
        return f"a {kind} name must be at most {limit} characters"
    return None


def _why(value: str) -> str:
    """': <the first character the rule refuses> is ...', naming why it is refused: a letter or digit outside ASCII
    (`ö`, `数`, a full-width `Ａ`), or a character of no kind the rule takes (a space, `/`); "" for a value whose
    characters are all taken (one starting with '.', '_' or '-')."""
    bad = next((c for c in value if not (c.isascii() and (c.isalnum() or c in "._-"))), None)
    if bad is None:
        return ""
    if bad.isalpha():
        return f": {bad!r} is a letter, but not an ASCII one"
    if bad.isdigit() or unicodedata.category(bad) == "Nd":
        return f": {bad!r} is a digit, but not an ASCII one"
    return f": {bad!r} is not one of them"


def control_character_error(field: str, value) -> str | None:
    """The message for one-line text (an external id, a working directory) that holds a control character (a
    newline, a tab, an escape, DEL, a C1 control: unicodedata category Cc, the trace importers' rule), a line or
    paragraph separator or an invisible format character (a bidirectional override such as U+202E, a zero-width
    space: inputs.refused_character, the free-text rule's), or None. Such a character reaches terminals, CSV
    exports and logs as it is (new-user trial 14, F16: `external_id` "a\\nb" was stored; trial 21, F13: U+202E)."""
    from .inputs import refused_character

    bad = next((c for c in value if refused_character(c)), None) if isinstance(value, str) else None
    if bad is None:
        return None
    return f"{field} must be text without control characters ({value[:40]!r} holds {bad!r})"
