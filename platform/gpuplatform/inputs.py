"""The one input normaliser: every request passes it before any view, parser or query sees it.

`InputGuardMiddleware` refuses, before parsing, what no view can store or look up:

- a body longer than settings.REQUEST_BODY_MAX_BYTES (Content-Length, or more bytes than announced) -> 413
  `{"detail": "request body larger than N bytes"}` (the body is never read);
- a NUL character in the path -> 400 `{"path": ["NUL characters are not accepted"]}`;
- a query parameter whose name or value holds a NUL -> 400 `{"<param>": ["NUL characters are not accepted"]}`
  (an HTML page's: the same 400 in text, "<param>: NUL characters are not accepted", as a page names any bad
  parameter);
- on the REST API's own endpoints (`/api/v1/...`) and the pages' JSON endpoints (`*.json`), a query parameter sent
  empty or only whitespace (`?limit=`, `?state=`, `?task=%20`) -> 400 `{"<param>": [EMPTY_MESSAGE]}`, each such
  parameter named: one rule for every parameter of every endpoint (docs/api.md, "Query parameters"), so a script
  whose variable is unset never gets the default (every job, the first task's log) as though it had asked for it.
  Left out on purpose (takes_no_blank_params): the HTML pages, whose GET forms send every field, the empty ones
  meaning "no filter"; the admin and the static files; and the library views mounted beside the API
  (drf-spectacular's `/api/schema/`, `/api/docs/`, `/api/redoc/`), which speak their own protocol: Swagger UI's
  page loads its start-up script as `/api/docs/?script=`, and refusing that empty parameter left the docs page
  blank (session 27);
- a form body (url-encoded or multipart: the admin, the browser forms, `curl -d` / `-F`) with a NUL in a name or value -> 400 naming
  the field, unless the view is marked `@renders_form_errors`: a page whose form refuses a NUL itself
  (Django's form fields do) re-renders the form with the error next to the field, never a JSON 400.

JSON bodies are checked by `check_value` after parsing (api/parsers.py): NUL characters, non-finite numbers
(`1e999` parses as infinity) and nesting deeper than JSON_MAX_DEPTH.

A whole number of any size is NOT refused here: the field that reads it refuses it with its own path and
bounds (`roles[0].tasks` "less than or equal to 2147483647", `priority`, a log `offset`, a page `limit`),
as it refuses any other out-of-range number. `oversized_paths` lists the JSON paths of integers beyond 64
bits so the API's backstop (a database "out of range" error from a field without bounds, api/exceptions.py)
can still name the field instead of answering 500.

`DatabaseUnavailableMiddleware` answers a lost database (OperationalError / InterfaceError: PostgreSQL
stopped, restarting, refusing connections) with 503 JSON and `Retry-After`, never Django's HTML 500.

Numbers in query parameters (a page `limit`, an `offset`, a tier, a cycle, an id, a log `attempt`, a `step`) are
read by one parser, `whole_number`: ASCII digits only, with one leading '-' where the parameter takes negatives.
Python's int() also takes ' 1', '1_0', '+1' and other scripts' digits ('\\u0661', Arabic-Indic one), and
Django's and DRF's integer fields take '1.0': each of those is a 400 naming the parameter and its rule.

Free text (a team's description, a reason, any text field of the API) holds no control character other than
newline and tab (a carriage return only before a newline, as a browser's textarea sends it), no line or paragraph
separator (U+2028 / U+2029, which terminals and editors break lines at) and no invisible format character (the
bidirectional overrides such as U+202E, zero-width spaces; not the joiners U+200C / U+200D): `text_control_error`,
checked on the text as sent, before any trimming, so '\\v', '\\f' or U+0085 is refused wherever it is, never
trimmed away at the ends and refused inside. A text field sent as only white space ("\\n", " ") is refused too,
never trimmed to "" as if it had been left empty.

Errors: `InputError(field, message)` is what `check_value` raises; the API turns it into a 400.
"""
from __future__ import annotations

import logging
import math
import re
import unicodedata

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse

log = logging.getLogger("gpuplatform.inputs")

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
JSON_MAX_DEPTH = 64
NUL_MESSAGE = "NUL characters are not accepted"
INT_MESSAGE = f"must be a whole number between {INT64_MIN} and {INT64_MAX}"
DEFAULT_BODY_MAX_BYTES = 1 << 20  # 1 MiB: the largest legitimate body (a log chunk) is 64 KiB + JSON


FINITE_MESSAGE = "must be a finite number"
EMPTY_MESSAGE = "must not be empty (or only spaces): give a value, or leave the parameter out for its default"

_WHOLE = re.compile(r"[0-9]+")  # ASCII digits (re's \d is any script's digit)
_WHOLE_MAX_CHARS = 4300  # more digits than int() converts: out of any parameter's range anyway


def whole_number(raw, *, negative: bool = False) -> int | None:
    """`raw` (a query parameter's text) as an int when it is ASCII digits, with one leading '-' if `negative`;
    else None (a word, '', ' 1', '1.0', '1_0', '+1', '1e3', another script's digits). The range is the caller's
    rule: parse_whole."""
    if not isinstance(raw, str) or len(raw) > _WHOLE_MAX_CHARS:
        return None
    digits = raw[1:] if negative and raw.startswith("-") else raw
    return int(raw) if _WHOLE.fullmatch(digits) else None


def parse_whole(field: str, raw, min_value: int, max_value: int, message: str | None = None) -> int:
    """`raw` read by whole_number (negatives when min_value < 0) within min_value..max_value, else InputError
    naming `field` with `message` (default: "must be a whole number from <min> to <max>")."""
    value = whole_number(raw, negative=min_value < 0)
    if value is None or not min_value <= value <= max_value:
        raise InputError(field, message or f"must be a whole number from {min_value} to {max_value}")
    return value


def blank_params(query) -> dict[str, list[str]]:
    """{name: [EMPTY_MESSAGE]} for each parameter of `query` (a QueryDict) with a value that is empty or only
    whitespace (str.strip()'s: a space, '\\v', U+0085, U+3000 ...)."""
    return {name: [EMPTY_MESSAGE] for name in sorted(query) if any(not v.strip() for v in query.getlist(name))}


# The prefix of the REST API's own endpoints (gpuplatform.api.urls, federation included). Everything else under
# /api/ is a library's view (drf-spectacular's schema, Swagger UI and ReDoc) with its own query protocol, where an
# empty parameter can be meaningful: SpectacularSwaggerSplitView serves the page's script at `?script=` (empty on
# purpose), and a 400 there was a blank /api/docs/ in a real browser (session 27).
API_OWN_PREFIX = "/api/v1/"


def takes_no_blank_params(path: str) -> bool:
    """The paths under the empty-parameter rule: the REST API's own endpoints (API_OWN_PREFIX) and the pages' JSON
    endpoints. Not the HTML pages, whose forms send empty fields, nor the admin's, whose search box does, nor the
    static files, nor the library views under /api/ outside API_OWN_PREFIX (the schema and its docs pages)."""
    if path.startswith(API_OWN_PREFIX):
        return True
    return path.endswith(".json") and not path.startswith(("/admin/", "/static/", "/api/"))


# A character free text may not hold (text_control_error): Cc (C0, DEL, C1 including U+0085), the line and
# paragraph separators, and the invisible format characters (Cf): the bidirectional overrides, embeddings and
# isolates (U+202A..U+202E, U+2066..U+2069, U+200E / U+200F, U+061C) that make a terminal, a log or a page show the
# text in another order than it is (trial 21, F13: U+202E was stored in a job's fields), zero-width spaces, the byte
# order mark, the soft hyphen, tag characters. The zero-width joiner and non-joiner (U+200D, U+200C) stay: scripts
# (Persian, the Indic ones) and emoji sequences need them. Newline and tab are allowed in free text, a carriage
# return only before a newline; one-line text (names.control_character_error) takes neither.
_SEPARATORS = ("Zl", "Zp")
JOINERS = frozenset("\u200c\u200d")


def refused_character(c: str) -> bool:
    """Whether text may never hold `c`, wherever it is and whatever the field: a control character (Cc), a line or
    paragraph separator, or a format character (Cf) other than the joiners. Newline, tab and CR are Cc: free text
    lets them through itself (text_control_error)."""
    category = unicodedata.category(c)
    return category == "Cc" or category in _SEPARATORS or (category == "Cf" and c not in JOINERS)


def text_control_error(text: str) -> str | None:
    """The first character of `text` that free text may not hold (refused_character, newline and tab allowed, a
    carriage return only before a newline), as "'\\x0b' at character 3", else None. The caller words the rule
    before it ("a team's description has no control characters ...: "). The API's text fields all follow it
    (api/serializers/fields.make_text_fields_strict)."""
    for i, c in enumerate(text):
        if c in "\n\t" or (c == "\r" and text[i + 1:i + 2] == "\n"):
            continue
        if refused_character(c):
            return f"{c!r} at character {i + 1}"
    return None


TEXT_RULE = ("must be text without control characters other than newline and tab, nor invisible format characters "
             "such as the bidirectional override U+202E or a zero-width space: ")
ONE_LINE_RULE = ("must be one line of text, without a newline, a tab or another control character, nor invisible format "
                 "characters such as the bidirectional override U+202E or a zero-width space: ")
BLANK_TEXT = ("must not be only white space: give a value, or leave the field out (or send \"\" where it may be "
              "empty)")
BLANK_FORM_TEXT = "must not be only white space: give a value, or leave the field empty"
# Text fields that are one line wherever they are, in the API and the web forms: names (names.py: jobs, roles,
# queues, teams, nodes, member clusters). "alpha\n" was trimmed to "alpha" and taken (trial 22, F3). A job's
# external id, working directory and image, and the names of other things a body refers to (a queue, its parent, a
# flavor, a MIG profile, the completion role): "/tmp\n", "\t/tmp" and "a\n" were trimmed and taken (trial 26, F5).
ONE_LINE_FIELDS = frozenset({"name", "external_id", "working_dir", "image", "queue", "parent", "flavor", "mig_profile",
                             "completion_role"})


def one_line_error(text: str) -> str | None:
    """The first character one-line text may not hold (refused_character: newline, tab and CR too), as in
    text_control_error, else None."""
    for i, c in enumerate(text):
        if refused_character(c):
            return f"{c!r} at character {i + 1}"
    return None


def text_rule_error(text: str, *, one_line: bool = False, blank: str | None = BLANK_TEXT) -> tuple[str, str] | None:
    """The one text rule of every user text field, on the text as sent (before any trimming), as (message, code):
    the API's text fields (api.serializers.fields.make_text_fields_strict) and the web forms' (TextRuleForm) alike.
    Free text: text_control_error (TEXT_RULE, code "control"); one-line text (ONE_LINE_FIELDS): one_line_error
    (ONE_LINE_RULE); then text of only white space (`blank`, code "blank"; None: not checked). None when the text
    follows it."""
    if one_line and blank is not None and text and not text.strip() and text_control_error(text) is None:
        return blank, "blank"  # only spaces, newlines, tabs: say so first ("\n" in a one-line field is that too)
    where = one_line_error(text) if one_line else text_control_error(text)
    if where:
        return (ONE_LINE_RULE if one_line else TEXT_RULE) + where, "control"
    if blank is not None and text and not text.strip():
        return blank, "blank"
    return None


def error_text(detail) -> str:
    """An error as plain text for a page: a message as it is; DRF's error detail (ErrorDetail, which is text, in
    lists and dicts: a serializer's `errors`) as its messages, "; "-joined, a dict's as "key: message". A form error
    built from such a structure showed its Python repr (new-user trial 25h, 2: "labels: [ErrorDetail(string='Expected
    a dictionary ...', code='not_a_dict')]" on the admin's node page)."""
    if isinstance(detail, dict):
        return "; ".join(f"{key}: {error_text(value)}" if key not in ("__all__", "non_field_errors")
                         else error_text(value) for key, value in detail.items())
    if isinstance(detail, (list, tuple)):
        return "; ".join(error_text(item) for item in detail)
    return str(detail)


class TextRuleForm:
    """Mixin of a Django form (the admin's, the job form's): each of its text fields follows the API's text rule
    (text_rule_error) on the value as typed, before Django trims it, and shows the refusal on the field (trial 22,
    F3: the queue form trimmed "alpha\n" to "alpha" silently). A field named in ONE_LINE_FIELDS is one line.
    Left out: `text_rule_exempt` (a field that applies the rule itself in its own words: a team's description),
    passwords, hidden fields, and a value holding a NUL (Django's own error for it, as the input guard's).
    An error added to the form (add_error: a service's refusal, a serializer's errors) is plain text (error_text),
    never a repr of DRF's ErrorDetail lists."""

    text_rule_exempt: tuple[str, ...] = ()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        apply_text_rule(self, exempt=self.text_rule_exempt)

    def add_error(self, field, error):
        from django import forms

        if isinstance(error, dict) and field is None:  # {field: message}: Django files each under its field
            error = {key: error_text(value) for key, value in error.items()}
        elif not isinstance(error, forms.ValidationError):
            error = error_text(error)
        super().add_error(field, error)


def apply_text_rule(form, *, exempt=()) -> None:
    """TextRuleForm's check on each text field of `form` (an instance: its fields are its own copies)."""
    from django import forms

    for name, field in form.fields.items():
        if (name in exempt or not isinstance(field, forms.CharField)
                or isinstance(field.widget, (forms.PasswordInput, forms.HiddenInput))
                or getattr(field.clean, "text_rule", False)):
            continue

        # only white space in a required field is Django's "This field is required."; in an optional one it would be
        # trimmed to "" as though left empty: refused (BLANK_FORM_TEXT)
        def clean(value, _clean=field.clean, _one_line=name in ONE_LINE_FIELDS,
                  _blank=None if field.required else BLANK_FORM_TEXT):
            if isinstance(value, str) and "\x00" not in value:
                refused = text_rule_error(value, one_line=_one_line, blank=_blank)
                if refused:
                    raise forms.ValidationError(refused[0], code=refused[1])
            return _clean(value)

        clean.text_rule = True
        field.clean = clean


class InputError(ValueError):
    """A value no endpoint accepts: `field` names where it was (dotted path for JSON), `message` the rule."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def check_text(field: str, value: str) -> None:
    """Raise InputError when a query / form value holds a NUL (a number's range is its field's rule)."""
    if "\x00" in value:
        raise InputError(field, NUL_MESSAGE)


def api_path(dotted: str) -> str:
    """check_value's dotted path -> the API's error path: 'roles.0.tasks' -> 'roles[0].tasks'."""
    out = ""
    for part in dotted.split("."):
        out += f"[{part}]" if part.isdigit() and out else (f".{part}" if out else part)
    return out or "non_field_errors"


def oversized_paths(value, field: str = "", depth: int = 0) -> list[str]:
    """API paths (api_path) of the integers beyond 64 bits in parsed JSON, depth-bounded like check_value."""
    if depth > JSON_MAX_DEPTH or isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [] if INT64_MIN <= value <= INT64_MAX else [api_path(field)]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in oversized_paths(v, f"{field}.{k}" if field else str(k), depth + 1)]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in oversized_paths(v, f"{field}.{i}" if field else str(i), depth + 1)]
    return []


def check_value(value, field: str = "", depth: int = 0, nul_tolerant: frozenset = frozenset()) -> None:
    """Walk parsed JSON (depth-bounded): raise InputError for a NUL in a key or string, a non-finite float,
    or nesting deeper than JSON_MAX_DEPTH (an integer's range is its field's rule). `field` is the dotted path.
    `nul_tolerant`: top-level fields whose string VALUES may hold NUL (a task's output in an agent's
    report: the view replaces them, one byte for one)."""
    if depth > JSON_MAX_DEPTH:
        raise InputError(field or "non_field_errors", f"nested deeper than {JSON_MAX_DEPTH} levels")
    if isinstance(value, str):
        if "\x00" in value and top_field(field) not in nul_tolerant:
            raise InputError(field or "non_field_errors", NUL_MESSAGE)
    elif isinstance(value, (bool, int)) or value is None:
        return
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(field or "non_field_errors", FINITE_MESSAGE)
    elif isinstance(value, dict):
        for key, item in value.items():
            name = str(key).replace("\x00", "")
            path = f"{field}.{name}" if field else name
            if "\x00" in str(key):
                raise InputError(path or "non_field_errors", NUL_MESSAGE)
            check_value(item, path, depth + 1, nul_tolerant)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_value(item, f"{field}.{index}" if field else str(index), depth + 1, nul_tolerant)


def top_field(field: str) -> str:
    """The request field an error belongs to: 'labels.a' -> 'labels' (the API's error shape is flat)."""
    return field.split(".", 1)[0] or "non_field_errors"


def body_max_bytes() -> int:
    return int(getattr(settings, "REQUEST_BODY_MAX_BYTES", DEFAULT_BODY_MAX_BYTES))


def _refuse(field: str, message: str, status: int = 400) -> JsonResponse:
    return JsonResponse({field: [message]} if status == 400 else {"detail": message}, status=status)


class InputGuardMiddleware:
    """See the module docstring. Runs first (after SecurityMiddleware) so nothing reads a refused body."""

    FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        refused = self.refuse(request)
        return refused if refused is not None else self.get_response(request)

    def refuse(self, request):
        limit = body_max_bytes()
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return _refuse("Content-Length", "must be a whole number of bytes")
        if length > limit:
            return _refuse("", f"request body larger than {limit} bytes", status=413)
        if "\x00" in request.path:
            return _refuse("path", NUL_MESSAGE)
        error = _pair_error(request.GET, "query")
        if error is None:
            blank = blank_params(request.GET) if takes_no_blank_params(request.path) else None
            return JsonResponse(blank, status=400) if blank else None
        # an HTML page names a bad parameter in text, as for any other (new-user trial 15, F7), the API in JSON
        return text_bad_request({error[0]: [error[1]]}) if _is_page(request.path) else _refuse(*error)

    def process_view(self, request, view_func, view_args, view_kwargs):
        """The form-body check, once the view is known (a `renders_form_errors` view validates its form)."""
        if getattr(view_func, "renders_form_errors", False):
            return None
        if request.method not in ("POST", "PUT", "PATCH") or request.content_type not in self.FORM_TYPES or \
                not int(request.META.get("CONTENT_LENGTH") or 0):
            return None
        return _check_pairs(request.POST, "non_field_errors")


def _pair_error(pairs, unnamed: str) -> tuple[str, str] | None:
    """(field, message) of the first key or value of `pairs` (a QueryDict) that breaks the text rules (check_text;
    a NUL in a key is named by the key without it, or `unnamed`), else None."""
    try:
        for key, values in pairs.lists():
            if "\x00" in key:
                return key.replace("\x00", "") or unnamed, NUL_MESSAGE
            for value in values:
                check_text(key, value)
    except InputError as exc:
        return exc.field, exc.message
    return None


def _check_pairs(pairs, unnamed: str):
    """The JSON 400 refusing the first key or value of `pairs` that breaks the text rules (_pair_error), else None."""
    error = _pair_error(pairs, unnamed)
    return None if error is None else _refuse(*error)


def _is_page(path: str) -> bool:
    """An HTML page's path (not the REST API, the admin, or a page's JSON endpoint: *.json)."""
    return not (path.startswith(("/api/", "/admin/", "/metrics", "/static/")) or path.endswith(".json"))


def text_bad_request(errors: dict[str, list[str]]) -> HttpResponse:
    """An HTML page's 400 naming its bad parameters in text ("q: NUL characters are not accepted; foo: ..."), the
    pages' answer to any bad parameter (frontend.views_dashboards.page_takes, the topology page, this module's)."""
    return HttpResponse("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()), status=400,
                        content_type="text/plain; charset=utf-8")


FORMAT_ON_PAGE = "this page is HTML only (it takes no format)"


def html_only(*twins: str):
    """Decorator of an HTML page: `?format=` (any value) is a 400 naming the parameter and where the page's data is
    as JSON, `twins` (each a URL with what it is, filled from the view's keyword arguments: "/api/v1/jobs/{pk}/ (the
    REST API)"). A page has one format; DRF's `?format=json` convention belongs to the REST API and the pages' JSON
    endpoints (trial 22, F2: /queues/?format=json answered the page, while /nodes/ and /jobs/ refused it as an
    unknown parameter). Asked for JSON, the 400 is JSON ({"format": [message]}); otherwise text, as the pages'
    other 400s. Put it under @login_required (a visitor is sent to the login page first)."""
    from functools import wraps

    def decorate(view):
        @wraps(view)  # copies renders_form_errors and the like
        def wrapped(request, *args, **kwargs):
            if "format" not in request.GET:
                return view(request, *args, **kwargs)
            where = [t.format(**kwargs) for t in twins]
            message = (f"{FORMAT_ON_PAGE}; its data as JSON: {'; '.join(where)}" if where
                       else f"{FORMAT_ON_PAGE} and has no JSON form")
            if request.GET.getlist("format") == ["json"]:
                return JsonResponse({"format": [message]}, status=400)
            return text_bad_request({"format": [message]})
        return wrapped
    return decorate


def renders_form_errors(view):
    """Mark a page view whose Django form refuses NUL characters itself (forms.CharField's validator, a
    choice or number field's own rule): InputGuardMiddleware lets its form body through so the page
    re-renders the form with the error instead of a raw JSON 400. Its views must not query with a raw
    POST value before the form validated it."""
    view.renders_form_errors = True
    return view


class DatabaseUnavailableMiddleware:
    """503 JSON with Retry-After when the database cannot be reached (see the module docstring)."""

    RETRY_AFTER_SECONDS = 5

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, (OperationalError, InterfaceError)):
            log.warning("database unavailable: %s", exception.__class__.__name__)
            return database_unavailable()
        return None


class PageRefusalMiddleware:
    """A page action the user may not take (a viewer's cancel, a submit without a team, a non-admin's move: a
    page view's `PermissionDenied`) is the 403 page in the site's layout with the refusal's sentence
    (templates/403.html, `permission_denied_page`), not Django's blank '<h1>403 Forbidden</h1><p></p>'; the log
    has one line, not a Traceback, as an expected refusal is no error (new-user trial 25, A). The REST API
    keeps DRF's JSON 403 (DRF answers its own PermissionDenied; anything else under /api/ is left to Django)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        from django.core.exceptions import PermissionDenied

        if not isinstance(exception, PermissionDenied) or request.path.startswith("/api/"):
            return None
        log.info("refused %s %s for %s: %s", request.method, request.path,
                 getattr(getattr(request, "user", None), "username", "") or "anonymous", exception)
        return permission_denied_page(request, exception)


def permission_denied_page(request, exception=None) -> HttpResponse:
    """The 403 page (templates/403.html): the refusal's sentence, and a link back to the page the action sits
    under (/jobs/7/cancel/ -> /jobs/7/, /fragmentation/move/ -> /fragmentation/, /jobs/new/ -> /jobs/).
    Also handler403, for a PermissionDenied raised outside a view (JSON {"detail": ...} under /api/)."""
    from django.template import loader

    reason = str(exception or "") or "You may not do this."
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": reason}, status=403)
    back = request.path.rstrip("/").rsplit("/", 1)[0] + "/"
    body = loader.render_to_string("403.html", {"reason": reason, "back": back}, request=request)
    return HttpResponse(body, status=403)


class MethodNotAllowedMiddleware:
    """A 405 says what is allowed and why in its body, as the REST API does: Django's require_GET / require_safe /
    require_POST answer an empty body (only the Allow header). JSON (`{"detail": "Method \"PUT\" not
    allowed."}`, the API's words) on the JSON endpoints (/api/..., *.json, or a client that asks for JSON), a
    line of text elsewhere (new-user trial 11, F15)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code != 405 or getattr(response, "streaming", False) or response.content:
            return response
        allow = response.get("Allow", "")
        detail = f'Method "{request.method}" not allowed.'
        wants_json = (request.path.startswith("/api/") or request.path.endswith(".json")
                      or "application/json" in request.headers.get("Accept", ""))
        if wants_json:
            new = JsonResponse({"detail": detail, "allowed": [m.strip() for m in allow.split(",") if m.strip()]},
                               status=405)
        else:
            new = HttpResponse(f"{detail} Allowed: {allow}\n", status=405, content_type="text/plain; charset=utf-8")
        for header, value in response.items():
            if header.lower() not in ("content-type", "content-length"):
                new[header] = value
        return new


def database_unavailable() -> JsonResponse:
    response = JsonResponse({"detail": "the database is unavailable; retry shortly"}, status=503)
    response["Retry-After"] = str(DatabaseUnavailableMiddleware.RETRY_AFTER_SECONDS)
    return response


def page_not_found(request, exception=None, *args, **kwargs):
    """handler404: everything under /api/ answers JSON `{"detail": "not found: <path>"}` (an unknown route,
    an id the URL pattern refuses); other paths keep Django's HTML 404 page."""
    from django.views.defaults import page_not_found as django_page_not_found

    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"not found: {request.path}"}, status=404)
    return django_page_not_found(request, exception, *args, **kwargs)


def server_error(request, *args, **kwargs):
    """handler500: a database outage raised outside a view (session save, authentication middleware) is a
    503 JSON with Retry-After too; any other uncaught error keeps Django's plain 500 page (JSON on /api/)."""
    import sys

    from django.views.defaults import server_error as django_server_error

    exc = sys.exc_info()[1]
    if isinstance(exc, (OperationalError, InterfaceError)):
        return database_unavailable()
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "internal error"}, status=500)
    return django_server_error(request, *args, **kwargs)
