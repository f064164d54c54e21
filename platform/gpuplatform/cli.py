"""gpuctl: a small command-line client for the REST API (stdlib: argparse + urllib; PyYAML for YAML files).

    export GPUCTL_API=http://127.0.0.1:8000 GPUCTL_TOKEN=<token from /api/v1/auth-token/ or the admin>
    gpuctl submit --queue alpha --name train-7b --tasks 4 --gpus 8 --command "python3 train.py --epochs 3"
                  [--env NCCL_DEBUG=INFO ...] [--workdir /srv/run] [--image nvcr.io/nvidia/pytorch:24.05-py3]
                  [--max-restarts 2] [--time-limit 3600] [--min-available 4] [--priority 5] [--flavor H100]
                  [--topology hard --highest-tier 2] [--team alpha]
    gpuctl submit --queue alpha --name train-7b --gpus 8 -- python3 train.py --epochs 3   # argv after --
    gpuctl submit --file job.json          # the POST /api/v1/jobs/ body as JSON (or .yaml / .yml; - = stdin)
    gpuctl list [--state pending] [--queue alpha] [--team alpha] [--limit 50 | --all] [--json | -o wide]
    gpuctl get 42
    gpuctl logs 42 [--task 17 | --task worker-1] [--attempt 0] [--follow] [--raw]
    gpuctl cancel 42 [--reason "wrong data"]
    gpuctl set-quota alpha H100 --guarantee 8 --quota 32 [--limit 64 | --no-limit]
    gpuctl submit --queue alpha --name small --tasks 2 --gpus 0.5 -- python3 serve.py   # half of one shared GPU each
    gpuctl set-sharing node-01 shared [--gpus 3,4]   # exclusive | shared | auto (platform admins)
    gpuctl queues                          # the queues you may see: parent, team, weight, state, use, quotas
    gpuctl nodes [--flavor H100] [--state ready]   # every node: flavor, state, GPUs, in use, unhealthy, domain

What a job runs (docs/execution.md): `--command` is one line split like a shell would (shlex), or the argv
is everything after `--`; `--env NAME=VALUE` may be repeated; `--time-limit` is in seconds. With `--file`,
these flags and the job's own (--name, --queue, --team, --priority, --no-preempt, --topology, --highest-tier,
--numa), when given, override the file's fields; the role flags (--role, --tasks, --gpus, --cpu-milli, --memory-mib,
--min-available, --flavor, --group-size, --group-tier) are refused with it (exit 2): set roles in the file. A value JSON
cannot carry is refused naming its path (exit 2): an unquoted YAML date (`name: 2024-01-01`: quote it) and a
non-finite number (`tasks: .inf`, JSON `NaN`). `logs` prints a task's combined stdout/stderr (the
first task unless `--task`; the job's current attempt unless `--attempt`); `--follow` keeps polling every 2 s until
the task has ended, going on with a restarted gang's new attempt ("--- worker-0: attempt 1 ---"). With nothing to show,
`logs` says why on stderr (not started yet, no output, or a simulated job or node that runs no process, which
--follow does not wait for) and exits 0, as `list` does with no jobs.

On a terminal, `logs` shows a control character of the output other than newline and tab (an escape sequence,
a lone carriage return, a bidi override) visibly, as `cat -v` does (ESC as ^[, U+202E as <U+202E>), so a job
cannot recolour, retitle or rewrite the terminal; `--raw` writes it as it is. Piped or redirected, the output is
always written as the task printed it.

`logs --follow` ends by saying on stderr how the task and its job ended (`gpuctl logs: worker-0 ended: failed,
exit code 4; job 34 failed: task worker[0] exited with code 4 [diagnosis unknown]`).

`list` shows a job stopping in its grace period (the API's state `preempting`) that will end rather than wait
again as "cancelling" or "stopping (<what it ends as>)"; `--state cancelling` / `--state stopping` list them
(the API's filter takes these words).

The job table's last column shows a running job's nodes; a pending job's queue position, estimated start ("starts in
about 2 h 10 m (90 %: 5 h)", counted from the cluster's clock, or why there is none) and reason; an ended job's nodes
and how it ended ("exit code 1: task worker[0] exited with code 1").
The job table (`list`, `get`, `submit`, `cancel`) fits its last column (NODES / POSITION START REASON / END) to the terminal's
width (COLUMNS, else the terminal's own), cutting it with "..." only on a terminal; piped or redirected it is
never cut, nor with `-o wide` (or `--wide`).

`queues` (as `sinfo -s` / `sacctmgr show assoc` / `kubectl get clusterqueue`) prints one line per queue you may see
from GET /api/v1/queues/ (parent, team, weight, state, each flavor's guarantee/quota/limit, "none" for no limit of its
own) and the live usage of GET /api/v1/cluster-metrics/current/ (GPU-equivalents in use, running and pending jobs,
GPU-equivalents pending: an inner queue's are its subtree's; "-" where the API gives none, as for the platform's inner
queues to a user who is not a platform admin). `nodes` (as `sinfo -N`) prints one line per node from GET
/api/v1/nodes/ (--flavor / --state: the API's filters): its flavor, state, GPUs, GPU-equivalents in use, its unhealthy
GPUs by index (gpu3,gpu5), its domain, and why it is in its state. Both follow the API's pages; with none to show they say
so on stderr and exit 0.

`--json` (or `-o json`) prints the API's answers as they are (`nodes`: every page's results in one list; `queues`:
the queues' list, with the usage rows as `usage` and the clock they were read at as `usage_time`). Exit status: 0 ok, 1 refused by the API (the field errors
are printed; `submit` names the flag that filled a field first: `--gpus (roles[0].gpu_fraction): ...`, while a
--file body's own fields keep the API's names), 2 bad usage or the API unreachable (or not at that address: an answer that is not JSON;
an address (GPUCTL_API / --api) that is not an http:// or https:// URL in printable ASCII with a host and a port from 1
to 65535, or a token (GPUCTL_TOKEN / --token) that is not printable ASCII without spaces, is refused before any
request, naming where it came from and the rule), 3
`logs --follow` saw the task or its job fail (as `srun` exits non-zero), 4 `logs --follow` saw the job
cancelled (its task, stopped by the cancel, reads "cancelled"), 130 interrupted. set-quota changes only the values given (the others keep theirs; a new quota starts at
guarantee 0, quota 0, no limit; no value at all is a usage error), reads the quota's ETag and
sends it back in If-Match, so it fails (412) rather than overwrite a change made since.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import shlex
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from .wording import LEAD_WORDS, no_estimate_words, ordinal, reason_words, start_words

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # job_rules.ENV_NAME; the server checks the rest
MAX_ENV_NAME_CHARS = 256  # job_rules.MAX_ENV_NAME_CHARS (the CLI imports nothing of the server)
LOG_POLL_SECONDS = 2.0
LOG_LIMIT_BYTES = 65536  # the most the logs API serves per call
_sleep = time.sleep  # the --follow wait (tests replace it)


class UsageError(Exception):
    """A bad flag or file: printed as "gpuctl <command>: <message>", exit status 2."""


class Unsuccessful(Exception):
    """`logs --follow` followed a task to its end and the task or its job did not succeed: exit status 3 (the
    end was printed already)."""


class Cancelled(Exception):
    """`logs --follow` followed a task to its end and its job was cancelled (the task did not fail): exit status 4
    (the end was printed already), so a script tells a cancel from a failure (new-user trial 14, F11)."""


class ApiError(Exception):
    def __init__(self, status: int, body):
        self.status, self.body = status, body
        super().__init__(f"HTTP {status}")


def api_base(url: str) -> str:
    """The server's address from GPUCTL_API / --api: a trailing /api/v1 (a natural thing to set, the API's own
    path) is dropped, since every request path already starts with it (new-user trial 7, F12)."""
    return re.sub(r"/api/v1/*$", "", url.rstrip("/"))


DEFAULT_API = "http://127.0.0.1:8000"


def setting(given: str | None, flag: str, variable: str, default: str) -> tuple[str, str]:
    """(where a setting came from: `flag`, `variable` or "default", its value): the flag when given, else the
    environment variable when set, else `default`."""
    if given is not None:
        return flag, given
    if variable in os.environ:
        return variable, os.environ[variable]
    return "default", default


def _odd_character(text: str, allowed) -> str:
    """'' when every character of `text` passes `allowed`, else what the first that does not is and where
    ("a newline at character 3"), never the text itself (a token is a secret)."""
    for i, ch in enumerate(text, 1):
        if not allowed(ch):
            what = ({"\n": "a newline", "\r": "a carriage return", "\t": "a tab", " ": "a space"}.get(ch)
                    or (f"the control character U+{ord(ch):04X}" if ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0
                        else f"the non-ASCII character U+{ord(ch):04X}"))
            return f"{what} at character {i}"
    return ""


def api_problem(url: str, source: str) -> str:
    """'' when `url` (GPUCTL_API / --api, named by `source`) is an address gpuctl can send requests to, else a
    sentence naming `source` and the rule it breaks: an http:// or https:// URL in printable ASCII with a host
    and, when given, a port from 1 to 65535 (urllib raised on the rest: an unclosed IPv6 bracket, a port that is
    not a number, a space or control character; and port 99999 read as "Connection refused")."""
    name = f"{source} {url!r}" if source != "default" else f"the default API address {url!r}"
    if not url.startswith(("http://", "https://")):
        return (f"{name}: the API address must start with http:// or https:// (e.g. {DEFAULT_API}; set "
                f"GPUCTL_API or pass --api)")
    odd = _odd_character(url, lambda ch: "!" <= ch <= "~")
    if odd:
        return f"{name}: a URL is printable ASCII with no spaces (percent-encode the rest), not {odd}"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        if "port" in str(exc).lower():
            return f"{name}: the port must be a number from 1 to 65535"
        return f"{name}: not a valid URL ({exc}; an IPv6 address is written in brackets: http://[::1]:8000)"
    if not parts.hostname:
        return f"{name}: the URL has no host (e.g. {DEFAULT_API})"
    if port == 0:
        return f"{name}: the port must be a number from 1 to 65535"
    return ""


def token_problem(token: str, source: str) -> str:
    """'' when `token` (GPUCTL_TOKEN / --token, named by `source`) can be sent in the Authorization header, else
    a sentence naming `source` and the rule: printable ASCII with no spaces, as the platform issues tokens (a
    newline in it was a traceback, "Invalid header value"). The token itself is never shown."""
    odd = _odd_character(token, lambda ch: "!" <= ch <= "~")
    if odd:
        return (f"{source}: a token is printable ASCII with no spaces (as POST /api/v1/auth-token/ issues them), "
                f"not {odd}")
    return ""


def refused_token_hint(source: str, base: str) -> str:
    """What to do when the server answered 401 to a token that was sent (knox's "Invalid token."): where the token
    came from (`source`: --token or GPUCTL_TOKEN), why a server refuses one, and README's sign-in line for a new
    one at `base`. The token itself is never shown."""
    where = "given with --token" if source == "--token" else f"in {source}"
    return (f"the server refused the token {where}: revoked, expired, or issued by another server or an earlier "
            f"demo database; a new one: curl -X POST {base}/api/v1/auth-token/ -d username=... --data-urlencode "
            f"'password=...' (README, gpuctl), or the admin issues one")


class Client:
    def __init__(self, base: str, token: str, timeout: float = 30.0):
        self.base, self.token, self.timeout = base.rstrip("/"), token, timeout
        self.cluster_time = None  # the cluster's clock in the last answer that gave it (X-Cluster-Time), aware

    def request(self, method: str, path: str, body=None, headers: dict | None = None) -> tuple[object, dict]:
        url = path if path.startswith("http") else f"{self.base}{path}"
        req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode())
        req.add_header("Accept", "application/json")
        if body is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Token {self.token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
                self.cluster_time = _when(resp.headers.get("X-Cluster-Time")) or self.cluster_time
                return (json.loads(raw) if raw else None), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                detail = json.loads(raw)
            except ValueError:
                detail = raw.decode(errors="replace")
            raise ApiError(exc.code, detail) from None

    def get(self, path, **params):
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None}, doseq=True)
        return self.request("GET", f"{path}?{query}" if query else path)


MIN_LAST_COLUMN = 20  # the fewest characters of the last column a table keeps when it cuts it to fit
CUT = "..."


def _table(rows: list[list], header: list[str], width: int | None = None) -> str:
    """Rows in columns two spaces apart. With `width`, the last column (a job's nodes or pending reason, the one
    that runs long) is cut to fit that many characters per line, ending in "...", keeping at least
    MIN_LAST_COLUMN of it; None never cuts (piped output, -o wide)."""
    cells = [header] + [["" if c is None else str(c) for c in r] for r in rows]
    if width is not None:
        lead = sum(max(len(r[i]) for r in cells) + 2 for i in range(len(header) - 1))
        room = max(width - lead, MIN_LAST_COLUMN)
        cells = [r[:-1] + [r[-1] if len(r[-1]) <= room else r[-1][:room - len(CUT)] + CUT] for r in cells]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def table_width(a, stream=None) -> int | None:
    """The width the job table fits to: None (never cut) with -o wide / --wide or when `stream` (stdout) is not a
    terminal (piped, redirected: a script or `grep` reads whole lines); else COLUMNS when set, or the terminal's
    width (shutil.get_terminal_size). New-user trial 22, G4: the reason was cut at 60 characters even at
    COLUMNS=250 and piped, so a retry's time lost its seconds."""
    stream = sys.stdout if stream is None else stream
    if getattr(a, "wide", False):
        return None
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return shutil.get_terminal_size().columns


def _job_line(j: dict, now=None) -> list:
    """One row of the job table; `now`: the cluster's clock as the API gave it (Client.cluster_time), what a pending
    job's estimated start is counted from (None: from the forecast's own time)."""
    if "generation" in j:  # a federated job (gpuctl against a federation manager): where it went, or why not yet
        where = f"cluster {j['cluster']}" if j.get("cluster") else (j.get("reason") or "")
        prio = (j.get("spec") or {}).get("priority", 0)
        return [j["id"], j["name"], j["team"], j["queue"], j["state"], j["gpus"], prio, where]
    where = ",".join(j.get("nodes") or [])
    if j["state"] == "pending" and not where:
        # the place in its queue in words: "#2" read as a job's id, which the pages write "A #19" (trial 25, F6)
        place = f"{ordinal(j['position'])} in queue: " if j.get("position") is not None else ""
        # a time in the reason counted from the cluster's clock (an older server sends none: the time as given)
        reason = reason_words(j.get("pending_reason") or "", now)
        where = place + "; ".join(w for w in (_estimate(j, now), reason) if w)
    elif j["state"] in ENDED_STATES:
        where = "; ".join(w for w in (where, _end(j)) if w)
    gpus = j["gpus"]
    req = j.get("gpu_request") or ""
    if req and req != str(gpus):  # a share, memory or MIG request: the GPU-equivalents and what was asked
        gpus = f"{gpus} ({req})"
    return [j["id"], j["name"], j["team"], j["queue"], _state(j), gpus, j["priority"], where]


ENDED_STATES = ("succeeded", "failed", "cancelled")  # Job.FINAL_STATES


def _when(text: str | None):
    """An API time ("2026-12-04T15:30:00Z") as an aware datetime, or None (absent or unreadable)."""
    try:
        return datetime.datetime.fromisoformat(text) if text else None
    except (TypeError, ValueError):
        return None


def _estimate(j: dict, now=None) -> str:
    """A pending job's estimated start in the pages' words (wording.start_words), counted from the cluster's clock as
    the API answered (`now`: X-Cluster-Time, as the pages count from clock.now()), else from the forecast's own time
    (`estimated_at`): "starts in about 2 h 10 m (90 %: 5 h)", "starts at the next cycle", "overdue: was due ...";
    without an estimate, why ("no estimate: ...", "estimate pending: ..."); "never starts" for a job refused for good
    (its reason says why). "" for an answer without the forecast's fields (a federated job). New-user trial 23: the
    README says every pending job shows an estimated start, and gpuctl showed none; re-check 24, R1: it counted from
    the forecast's time while the page counted down."""
    if j.get("never_fits"):
        return "never starts"
    if "estimated_start" not in j:
        return ""
    start, at = _when(j.get("estimated_start")), _when(j.get("estimated_at"))
    if start is None:
        note = no_estimate_words(j.get("estimate_note") or "", j.get("pending_reason"))
        return note if not note or note.startswith("estimate pending") else f"no estimate: {note}"
    if now is None and at is None:
        return f"starts at about {start:%Y-%m-%d %H:%M %Z}".rstrip()
    p90 = _when(j.get("estimated_start_p90"))
    if p90 is None and j.get("estimated_start_p90", "") is not None:
        p90 = start  # not given (an older answer): no bound shown
    words = start_words(start, p90, now or at, at, basis=j.get("estimate_note") or "")
    return f"starts {words}" if words.startswith(LEAD_WORDS) else words


def _end(j: dict) -> str:
    """How an ended job ended: "exit code 1: task worker[0] exited with code 1", "signal 9: ...", the end reason
    alone (a cancel, a success), or "" (new-user trial 23: only --json or the logs showed it)."""
    codes = []
    if j.get("exit_code") is not None:
        codes.append(f"exit code {j['exit_code']}")
    if j.get("exit_signal"):
        codes.append(f"signal {j['exit_signal']}")
    return ": ".join(w for w in (", ".join(codes), j.get("end_reason") or "") if w)


def _state(j: dict) -> str:
    """The job's state as a person reads it: a job stopping with grace (state "preempting") that will end rather
    than wait in its queue again says so ("cancelling", "stopping"), from the API's `stop.target`."""
    target = (j.get("stop") or {}).get("target") if j["state"] == "preempting" else None
    if target == "cancelled":
        return "cancelling"
    if target in ("failed", "succeeded", "restart", "recover"):  # Job.STOPPING_WORDS["stopping"] (no Django here)
        return f"stopping ({target})"
    return j["state"]


# the last column: a running job's nodes; a pending job's queue position, estimated start and reason; an ended
# job's nodes and how it ended (exit code, signal, end reason)
JOB_HEADER = ["ID", "NAME", "TEAM", "QUEUE", "STATE", "GPUS", "PRIO", "NODES / POSITION START REASON / END"]


def read_body(path: str) -> dict:
    """The POST /api/v1/jobs/ body from a JSON file, or YAML when the name ends in .yaml / .yml; path "-"
    reads standard input: JSON when its first character is "{" or "[" (then strict JSON: a malformed body is
    refused, never read again as YAML), else YAML. A key given twice in one object is refused in both, as
    the API refuses it. Raises UsageError: unreadable, not parseable, a duplicate key, not an object."""
    yaml_file = path.lower().endswith((".yaml", ".yml"))
    try:
        if path == "-":
            path = "standard input"
            text = sys.stdin.buffer.read().decode("utf-8")
            yaml_file = not text.lstrip().startswith(("{", "["))
        else:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
    if yaml_file:
        import yaml  # PyYAML, a dependency of the platform

        try:
            body = yaml.load(text, Loader=_unique_key_loader())
        except yaml.YAMLError as exc:
            raise UsageError(f"{path} is not valid YAML: {exc}") from None
    else:
        try:
            body = json.loads(text, object_pairs_hook=_unique_keys)
        except ValueError as exc:
            raise UsageError(f"{path} is not valid JSON: {exc}") from None
    if body is None:
        raise UsageError(f"{path} is empty (expected one object: the job)")
    if not isinstance(body, dict):
        raise UsageError(f"{path} must hold one object (the job), not {type(body).__name__}")
    check_json_values(body, "YAML" if yaml_file else "JSON")
    return body


def check_json_values(body: dict, reader: str) -> None:
    """Refuse a value the API's JSON cannot carry, naming its path (`name`, `env.RUN_DATE`, `roles[0].tasks`),
    before anything is sent: a YAML date or timestamp (`name: 2024-01-01`; json.dumps raised a TypeError,
    a traceback, new-user trial 23), a !!binary or !!set value, and a non-finite number (YAML .inf / .nan,
    JSON Infinity / NaN: the server's parse error named no field). Raises UsageError."""
    stack = [(body, "")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            items = []
            for key, item in value.items():
                if isinstance(key, YamlDate):
                    raise UsageError(f"{where or 'the file'}: {reader} read the key {key} as a {key.kind}; "
                                     f"quote it ('{key}')")
                items.append((item, f"{where}.{key}" if where else str(key)))
            stack.extend(reversed(items))  # the first in the file is reported first
        elif isinstance(value, list):
            stack.extend(reversed([(item, f"{where}[{i}]") for i, item in enumerate(value)]))
        elif isinstance(value, YamlDate):
            raise UsageError(f"{where}: {reader} read {value} as a {value.kind}; quote it ('{value}')")
        elif isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"{where}: must be a finite number ({reader} read {_spelling(value, reader)})")
        elif isinstance(value, (bytes, set)):
            kind = "binary data (!!binary)" if isinstance(value, bytes) else "a set (!!set)"
            raise UsageError(f"{where}: {reader} read {kind}, which JSON cannot carry: give text or a list")


def _spelling(value: float, reader: str) -> str:
    if math.isnan(value):
        return ".nan" if reader == "YAML" else "NaN"
    sign = "-" if value < 0 else ""
    return f"{sign}.inf" if reader == "YAML" else f"{sign}Infinity"


def _unique_keys(pairs: list) -> dict:
    """json.loads' object_pairs_hook: an object, refusing a key given twice (json keeps the last silently)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} (each key may be given once)")
        out[key] = value
    return out


def _unique_key_loader():
    """A yaml.SafeLoader that refuses a mapping key given twice (PyYAML keeps the last silently)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    continue  # an unhashable key: PyYAML's own construct_mapping refuses it
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (each key may be given once)", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_timestamp(self, node):
            value = super().construct_yaml_timestamp(node)
            return YamlDate(node.value, "date and time" if isinstance(value, datetime.datetime) else "date")

    UniqueKeyLoader.add_constructor("tag:yaml.org,2002:timestamp", UniqueKeyLoader.construct_yaml_timestamp)
    return UniqueKeyLoader


class YamlDate:
    """A scalar YAML 1.1 reads as a date or timestamp (`2024-01-01`, `2024-01-01T10:00:00Z`), kept as written so
    check_json_values can quote it back; JSON cannot carry it (the user meant a string)."""

    def __init__(self, text: str, kind: str):
        self.text, self.kind = text, kind

    def __str__(self) -> str:
        return self.text


def parse_env(pairs: list[str] | None) -> dict[str, str]:
    """["NAME=VALUE", ...] (repeated --env) -> {NAME: VALUE}; the value may be empty or contain '='.
    Raises UsageError: no '=', a name that is not a variable name, a name given twice."""
    env: dict[str, str] = {}
    for pair in pairs or ():
        name, eq, value = pair.partition("=")
        if not eq:
            raise UsageError(f"--env expects NAME=VALUE, got {pair!r}")
        if len(name) > MAX_ENV_NAME_CHARS:
            raise UsageError(f"--env {name[:40]}...: a variable name is at most {MAX_ENV_NAME_CHARS} characters "
                             f"(this one has {len(name)})")
        if not ENV_NAME.match(name):
            raise UsageError(f"--env {pair!r}: {name!r} is not a variable name (letters, digits and _, "
                             f"not starting with a digit)")
        if name in env:
            raise UsageError(f"--env {name} is given twice")
        env[name] = value
    return env


def command_argv(command: str | None, argv: list[str] | None) -> list[str] | None:
    """The job's argv from --command (split with shlex) or the words after `--`; None when neither is
    given. Raises UsageError: both given, bad quoting, an empty command."""
    if command is not None and argv:
        raise UsageError("give the command either with --command or after --, not both")
    if argv:
        return list(argv)
    if command is None:
        return None
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"--command is not a valid shell word list: {exc}") from None
    if not words:
        raise UsageError("--command is empty")
    return words


def exec_fields(a) -> dict:
    """The submit flags about what the job runs, only those given: command, env, working_dir, image,
    max_restarts, time_limit_seconds (seconds), completion_role."""
    out: dict = {}
    argv = command_argv(a.command_line, a.argv)
    if argv is not None:
        out["command"] = argv
    if a.env:
        out["env"] = parse_env(a.env)
    if a.max_restarts is not None:
        if a.max_restarts < 0:
            raise UsageError(f"--max-restarts must be 0 or more, got {a.max_restarts}")
        out["max_restarts"] = a.max_restarts
    if a.time_limit is not None:
        if a.time_limit <= 0:
            raise UsageError(f"--time-limit is in seconds and must be positive, got {a.time_limit}")
        out["time_limit_seconds"] = a.time_limit
    for flag, key in (("workdir", "working_dir"), ("image", "image"), ("completion_role", "completion_role")):
        if getattr(a, flag) is not None:
            out[key] = getattr(a, flag)
    return out


def _tier_arg(value: str | None):
    """A tier flag: a number stays a number, a name ("tier-1", "nvlink", "leaf") is sent as given (the
    server resolves it, or answers 400 naming it)."""
    if value is None:
        return None
    return int(value) if value.isdigit() else value


# the submit flags that shape the single role built from flags; with --file (whose roles are a list) they are refused
ROLE_FLAGS = (("--role", "role"), ("--tasks", "tasks"), ("--gpus", "gpus"), ("--cpu-milli", "cpu_milli"),
              ("--memory-mib", "memory_mib"), ("--min-available", "min_available"), ("--flavor", "flavor"), ("--group-size", "group_size"),
              ("--group-tier", "group_tier"))


# the job flags given over a --file body: (dest, the body's key, the flag)
JOB_FLAGS = (("name", "name", "--name"), ("queue", "queue", "--queue"), ("team", "team", "--team"),
             ("priority", "priority", "--priority"), ("topology", "topology_mode", "--topology"),
             ("numa", "numa", "--numa"))
# the run fields exec_fields fills -> their flag (the command's: run_flags)
RUN_FLAGS = {"env": "--env", "max_restarts": "--max-restarts", "time_limit_seconds": "--time-limit",
             "working_dir": "--workdir", "image": "--image", "completion_role": "--completion-role"}


def run_flags(a, run: dict) -> dict[str, str]:
    """The API field -> gpuctl flag of each run field exec_fields filled (`run`)."""
    flags = {key: RUN_FLAGS[key] for key in run if key in RUN_FLAGS}
    if "command" in run:
        flags["command"] = "--command" if a.command_line is not None else "the argv after --"
    return flags


def submit_body(a, flags: dict | None = None) -> dict:
    """The POST /api/v1/jobs/ body from the submit flags, or from --file with the run flags and the job
    flags (--name, --queue, --team, --priority, --no-preempt, --interruptible, --topology, --highest-tier, --numa) given over
    it. Raises UsageError for bad or missing flags, and for a role flag (ROLE_FLAGS) given with --file.
    `flags`, when given, is filled with the API field -> flag of each field a flag filled (the one-role form's
    fields, defaults too; over --file, the flags given): flag_keys names the flag in the API's errors."""
    flags = {} if flags is None else flags
    run = exec_fields(a)
    flags.update(run_flags(a, run))
    if a.file:
        shape = [flag for flag, dest in ROLE_FLAGS if getattr(a, dest) is not None]
        if shape:  # the file's roles are a list: which one a flag would change is ambiguous
            raise UsageError(f"{', '.join(shape)} cannot be combined with --file (set the roles in the file)")
        body = read_body(a.file)
        body.update(run)
        for dest, key, flag in JOB_FLAGS:
            if getattr(a, dest) is not None:
                body[key] = getattr(a, dest)
                flags[key] = flag
        if a.highest_tier is not None:
            body["highest_tier"] = _tier_arg(a.highest_tier)
            flags["highest_tier"] = "--highest-tier"
        if a.no_preempt:
            body["preemptible"] = False
            flags["preemptible"] = "--no-preempt"
        if a.interruptible:
            body["interruptible"] = True
            flags["interruptible"] = "--interruptible"
        return body
    if not (a.queue and a.name):
        raise UsageError("--queue and --name are required (or --file)")
    if "command" not in run:
        raise UsageError('a job needs a command: --command "python3 train.py" or -- python3 train.py')
    role = {"name": a.role or "worker", "tasks": 1 if a.tasks is None else a.tasks, "flavor": a.flavor or ""}
    gpus = 1 if a.gpus is None else a.gpus
    if isinstance(gpus, float):  # a fraction of one GPU (0 < x < 1, see _gpus_arg)
        role["gpu_fraction"] = gpus
    else:
        role["gpus_per_task"] = gpus
    if a.min_available is not None:
        role["min_available"] = a.min_available
    if a.cpu_milli is not None:  # any value given goes to the server, whose rule names it (0: none asked)
        role["cpu_milli"] = a.cpu_milli
    if a.memory_mib is not None:  # (new-user trial 22b: the API takes memory_mib, gpuctl had no flag for it)
        role["memory_mib"] = a.memory_mib
    if a.group_size is not None or a.group_tier is not None:
        role.update(group_size=a.group_size, group_highest_tier=_tier_arg(a.group_tier))
    body = {"name": a.name, "queue": a.queue, "priority": a.priority or 0, "roles": [role],
            "topology_mode": a.topology or "none", "highest_tier": _tier_arg(a.highest_tier), "time_limit_seconds": None,
            **run}
    if a.numa:
        body["numa"] = a.numa
    if a.team:
        body["team"] = a.team
    if a.no_preempt:
        body["preemptible"] = False
    if a.interruptible:
        body["interruptible"] = True
    # every field of this form comes from a flag (or its default): the role's, then the job's
    flags.update({f"roles[0].{key}": flag for key, flag in ROLE_FIELD_FLAGS.items() if key in role})
    flags.update({key: flag for _, key, flag in JOB_FLAGS if key in body})
    flags.update({key: flag for key, flag in (("highest_tier", "--highest-tier"), ("preemptible", "--no-preempt"),
                                              ("interruptible", "--interruptible")) if key in body})
    return body


# the one-role form's role fields -> the flag that fills them
ROLE_FIELD_FLAGS = {"name": "--role", "tasks": "--tasks", "gpus_per_task": "--gpus", "gpu_fraction": "--gpus",
                    "flavor": "--flavor", "min_available": "--min-available", "cpu_milli": "--cpu-milli",
                    "memory_mib": "--memory-mib", "group_size": "--group-size", "group_highest_tier": "--group-tier"}


def flag_keys(body, flags: dict[str, str]):
    """An API error body with each key about a field gpuctl filled from a flag named by that flag first,
    "--gpus (roles[0].gpu_fraction)": the user typed --gpus, not a field (new-user trial 24, F6). A key inside
    such a field ("env.RANK", "command[0]") is named by its flag too; the others (a --file body's own fields,
    "roles", "detail") stay the API's."""
    if not isinstance(body, dict) or not flags:
        return body
    out = {}
    for key, problems in body.items():
        flag = next((f for field, f in flags.items()
                     if key == field or str(key).startswith((f"{field}.", f"{field}["))), None)
        out[f"{flag} ({key})" if flag else key] = problems
    return out


def cmd_submit(client: Client, a) -> object:
    flags: dict[str, str] = {}
    body = submit_body(a, flags)
    try:
        job, _ = client.request("POST", "/api/v1/jobs/", body)
    except ApiError as exc:
        raise ApiError(exc.status, flag_keys(exc.body, flags)) from None
    return job


PAGE_MAX = 500  # the most jobs one GET /api/v1/jobs/ answers (?limit=, docs/api.md)


def cmd_list(client: Client, a) -> object:
    """Up to --limit jobs (every job with --all), newest first: pages of at most PAGE_MAX, following the
    API's `next` links. Returns {"count", "results", "next"} (next: where more would start, or null)."""
    if a.limit is not None and a.limit < 1:
        raise UsageError(f"--limit must be at least 1 (got {a.limit}); --all lists every job")
    want = None if a.all else (a.limit or 50)
    page, _ = client.get("/api/v1/jobs/", state=a.state, queue=a.queue, team=a.team,
                         limit=PAGE_MAX if want is None else min(want, PAGE_MAX))
    rows = list(page["results"])
    while page.get("next") and (want is None or len(rows) < want):
        page, _ = client.request("GET", page["next"])
        rows += page["results"]
    more = page.get("next") or (want is not None and len(rows) > want)
    rows = rows if want is None else rows[:want]
    return {"count": page.get("count"), "results": rows, "next": page.get("next") if more else None,
            "shown": len(rows)}


def all_pages(client: Client, path: str, **params) -> dict:
    """Every row of a short list (queues, nodes: limit/offset pages of at most PAGE_MAX), following the API's
    `next` links: {"count", "next": null, "previous": null, "results": [every row]}."""
    page, _ = client.get(path, limit=PAGE_MAX, **params)
    rows = list(page["results"])
    while page.get("next"):
        page, _ = client.request("GET", page["next"])
        rows += page["results"]
    return {"count": page.get("count", len(rows)), "next": None, "previous": None, "results": rows}


def cmd_queues(client: Client, a) -> object:
    """The queues the caller may see (GET /api/v1/queues/) with their live usage as GET
    /api/v1/cluster-metrics/current/ gives it (`usage`: its `queues` rows; `usage_time`: its `queues_time`)."""
    result = all_pages(client, "/api/v1/queues/")
    current, _ = client.request("GET", "/api/v1/cluster-metrics/current/")
    result["usage"], result["usage_time"] = current.get("queues") or [], current.get("queues_time")
    return result


def cmd_nodes(client: Client, a) -> object:
    """Every node (GET /api/v1/nodes/), or those of --flavor / --state (the API's own filters)."""
    return all_pages(client, "/api/v1/nodes/", flavor=a.flavor, state=a.state)


QUEUE_HEADER = ["NAME", "PARENT", "TEAM", "WEIGHT", "STATE", "USED", "RUNNING", "PENDING", "PENDING-GPUS",
                "QUOTAS (FLAVOR GUARANTEE/QUOTA/LIMIT)"]
NODE_HEADER = ["NAME", "FLAVOR", "STATE", "GPUS", "USED", "UNHEALTHY", "DOMAIN", "REASON"]


def _shown(value) -> str:
    """A figure as the API gave it; "-" where it gave none (a blank cell would shift the columns for awk)."""
    return "-" if value is None or value == "" else str(value)


def _queue_line(q: dict, usage: dict | None) -> list:
    """One row of the queue table: the queue as GET /api/v1/queues/ gives it, and its row of
    cluster-metrics/current's `queues` (None: the API gives this caller no usage for it: every figure "-")."""
    u = usage or {}
    quotas = ", ".join(f"{x['flavor']} {x['guarantee']}/{x['quota']}/{'none' if x['limit'] is None else x['limit']}"
                       for x in q.get("quotas") or [])
    return [q["name"], _shown(q.get("parent")), _shown(q.get("team")), _shown(q.get("weight")), q["state"],
            _shown(u.get("used")), _shown(u.get("running_jobs")), _shown(u.get("pending_jobs")),
            _shown(u.get("pending_demand")), quotas or "none set"]


def _node_line(n: dict) -> list:
    """One row of the node table, from the node as GET /api/v1/nodes/ gives it: UNHEALTHY names the GPUs whose
    `health` is not healthy by index ("gpu3,gpu5": one word, so `awk` still finds DOMAIN as the 7th); REASON is why the
    node takes no work, by the nodes page's rule (models.Node.out_of_service_reason: a not_ready node's move reason,
    else its health reason, else the reason it entered its state unless it is ready; none for a ready node without a
    health reason), and a hot spare's mark. Session 27, an admin's trial: a ready node showed its stale last reason
    ("check /bin/true: exit 0; output:", "returned to ready by admin") where the nodes page showed none."""
    sick = [f"gpu{g['index']}" for g in n.get("gpus") or [] if g.get("health") != "healthy"]
    state, moved, health = n.get("state"), n.get("state_reason") or "", n.get("health_reason") or ""
    why = moved if state == "not_ready" and moved else health or (moved if state != "ready" else "")
    reason = "; ".join(w for w in ("hot spare" if n.get("spare") else "", why) if w)
    return [n["name"], _shown(n.get("flavor")), n["state"], _shown(n.get("gpu_count")),
            _shown(n.get("allocated_gpus")), ",".join(sick) or "-", _shown(n.get("domain")),
            reason]


def cmd_get(client: Client, a) -> object:
    return client.get(f"/api/v1/jobs/{a.id}/")[0]


def first_task(client: Client, job_id: int) -> str | None:
    """The task `logs` shows without --task: the job's first task (its id when the job's answer lists
    tasks, else "<first role>-0"; None for a federated job: no `task` sent, the member's first task)."""
    job, _ = client.request("GET", f"/api/v1/jobs/{job_id}/")
    if isinstance(job, dict) and "remote_id" in job and "tasks" not in job:
        # a federation manager's job (its FederatedJob: docs/federation.md): the tasks are its member copy's, and
        # the manager's logs endpoint proxies them, the first task by default (new-user trial 14, F7: "job 1 has no
        # tasks", exit 0, for a federated job running 2 tasks)
        if not job.get("cluster") or job.get("remote_id") is None:
            why = f" ({job['reason']})" if job.get("reason") else ""
            raise UsageError(f"job {job_id} is a federated job ({job.get('state')}) with no copy on a member cluster "
                             f"yet, so no logs yet{why}; gpuctl get {job_id} shows where it waits")
        return None  # the member job's first task: `task` left out (sent empty, it is a 400: docs/api.md)
    tasks = job.get("tasks") if isinstance(job, dict) else None
    if tasks:
        first = tasks[0]
        return str(first.get("id") if isinstance(first, dict) else first)
    roles = job.get("roles") if isinstance(job, dict) else None
    if not roles:
        raise UsageError(f"job {job_id} has no tasks")
    return f"{roles[0]['name']}-0"


def _write(stream, text: str) -> None:
    """Write log text as it is; a terminal that cannot show a character gets a replacement, not an error."""
    try:
        stream.write(text)
    except UnicodeEncodeError:
        encoding = getattr(stream, "encoding", None) or "ascii"
        stream.write(text.encode(encoding, errors="replace").decode(encoding))
    stream.flush()


def _visible(ch: str) -> str:
    """How a control character is shown on a terminal: ^[ for ESC (caret notation, as `cat -v` and `less` show
    C0 controls), ^? for DEL, <U+202E> for a C1 control or a format character (bidi overrides, zero widths)."""
    code = ord(ch)
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    return f"<U+{code:04X}>"


_CONTROL = re.compile(r"\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e"
                      r"\u2060-\u2069\ufeff\ufff9-\ufffb]")


def terminal_safe(text: str) -> str:
    """`text` with every control character but newline and tab (a CR only before a newline) shown visibly
    (_visible): a job's escape sequences cannot recolour, retitle or rewrite the user's terminal, nor a bidi
    override reorder what it shows (new-user trial 14, F19)."""
    return _CONTROL.sub(lambda m: _visible(m.group()), text)


def _for(stream, text: str, raw: bool) -> str:
    """What `logs` writes: the task's text as it is when piped or with --raw, terminal_safe on a terminal."""
    isatty = getattr(stream, "isatty", None)
    return text if raw or not (isatty and isatty()) else terminal_safe(text)


def cmd_logs(client: Client, a, out=None, err=None) -> None:
    """Print a task's combined stdout/stderr from GET /api/v1/jobs/{id}/logs/ ({task, name, attempt, offset,
    next_offset, size, trimmed, data, complete}; offsets and sizes in bytes). Reads page after page (at most
    LOG_LIMIT_BYTES each) up to `size`; with --follow, then asks every LOG_POLL_SECONDS for more until the
    task has ended and everything is printed. Notes (older output trimmed, a new attempt) go to stderr.
    With --json, each answer is printed as one JSON line instead of the text."""
    out, err = out or sys.stdout, err or sys.stderr
    task = a.task or first_task(client, a.id)
    offset, seen = None, None  # seen: the attempt shown so far
    shown, noted = False, False  # any output printed; the reason for none printed
    while True:
        page, _ = client.get(f"/api/v1/jobs/{a.id}/logs/", task=task, attempt=a.attempt, offset=offset,
                             limit=LOG_LIMIT_BYTES)
        if seen is not None and page["attempt"] != seen:
            # The gang was restarted while we followed: show the new attempt from its start.
            _write(err, f"--- {page.get('name') or task}: attempt {page['attempt']} ---\n")
            offset, seen = None, page["attempt"]
            continue
        seen = page["attempt"]
        if page.get("trimmed") and (offset is None or page["offset"] > offset):
            _write(err, "(older output trimmed)\n")
        if a.json:
            _write(out, json.dumps(page) + "\n")
        else:
            _write(out, _for(out, page["data"], getattr(a, "raw", False)))
        shown = shown or bool(page["data"])
        if not shown and not noted and not a.json and page.get("note"):
            # Nothing to show: say why (no process runs it, not started yet, ...), exit 0 as `list` with no jobs
            _write(err, f"gpuctl logs: {page['note']}\n")
            noted = True
        if page["next_offset"] <= (offset if offset is not None else -1) and page["next_offset"] < page["size"]:
            raise UsageError(f"the logs API did not move past offset {offset}")  # never loop forever
        offset = page["next_offset"]
        if offset < page["size"]:
            continue  # more is there already
        if a.follow and page.get("complete"):
            if _follow_end(client, a.id, page, err, raw=getattr(a, "raw", False),
                           asked=a.attempt is not None) is RESTARTED:
                _sleep(LOG_POLL_SECONDS)
                continue  # the gang was restarted: the next read is the new attempt (its line above)
            return None
        if not a.follow or page.get("complete") or page.get("expect_output") is False:
            return None  # (no process runs this task: following it would wait for ever)
        _sleep(LOG_POLL_SECONDS)


JOB_ENDED = ("succeeded", "failed", "cancelled")
RESTARTED = object()  # _follow_end: the followed attempt ended and the job runs a new one, which --follow follows
END_WAIT_POLLS = 5  # LOG_POLL_SECONDS each: a gang's end follows its first failed task within its stop grace


def _task_end(t: dict, job_state: str | None = None) -> str:
    """'<state>, <how>': a task released by its job's cancel reads "cancelled" (the API's task state is
    `released`, the cancel stopped it; new-user trial 14, F11)."""
    how = (f"killed by signal {t['exit_signal']}" if t.get("exit_signal") is not None else
           f"exit code {t['exit_code']}" if t.get("exit_code") is not None else
           (t.get("end_message") or "")[:200])  # (the end message says the exit again, but for a lost task)
    state = "cancelled" if t.get("state") == "released" and job_state == "cancelled" else t.get("state") or "ended"
    return ", ".join(x for x in (state, how) if x)


def _follow_end(client: Client, job_id, page: dict, err, raw: bool = False, asked: bool = False):
    """--follow saw the task end: say on stderr how the task and its job ended (new-user trial 13, F20: a job
    that exited with code 4 printed nothing and gpuctl exited 0), waiting up to END_WAIT_POLLS polls for the
    job to end when the task did not succeed. Raises Unsuccessful (exit status 3) when the task or the job
    failed, Cancelled (exit status 4) when the job was cancelled and its task did not fail. When the job has
    gone on to a later attempt than the one read (a restart, a requeue) and lives: returns RESTARTED (nothing
    said) unless that attempt was asked for (--attempt), whose end is then the read's own `state` (failed or
    released), not the task's in the new attempt (new-user trial 26, F3: "worker-0 ended: running")."""
    for polls in range(END_WAIT_POLLS + 1):
        job, _ = client.get(f"/api/v1/jobs/{job_id}/")
        task = next((t for t in job.get("tasks") or [] if t.get("id") == page.get("task")), None) or {}
        moved_on = isinstance(job.get("attempt"), int) and job["attempt"] > page.get("attempt", job["attempt"])
        if (job.get("state") in JOB_ENDED or task.get("state") == "succeeded" or polls == END_WAIT_POLLS
                or job.get("state") == "pending" or moved_on):
            break
        _sleep(LOG_POLL_SECONDS)
    state = job.get("state") or "unknown"
    if moved_on:
        if not asked and state not in JOB_ENDED:
            return RESTARTED
        task = {"state": page.get("state")}  # the attempt read ended; the job's task runs a later one
    name = page.get("name") or page.get("task")
    if moved_on:
        name = f"{name} (attempt {page.get('attempt')})"
    line = f"gpuctl logs: {name} ended: {_task_end(task, state)}; job {job_id} {state}"
    if job.get("end_reason"):
        line += f": {job['end_reason']}"
    elif state not in JOB_ENDED:
        line += " (still live)"
    diagnosis = job.get("diagnosis") or {}
    if state == "failed" and diagnosis.get("category"):
        line += f" [diagnosis {diagnosis['category']}]"
    _write(err, _for(err, line[:2000], raw) + "\n")  # (the end message is the agent's words)
    if task.get("state") == "failed" or state == "failed":
        raise Unsuccessful(f"job {job_id} {state}")
    if state == "cancelled":
        raise Cancelled(f"job {job_id} cancelled")
    return None


def cmd_cancel(client: Client, a) -> object:
    return client.request("POST", f"/api/v1/jobs/{a.id}/cancel/", {"reason": a.reason or ""})[0]


def cmd_set_quota(client: Client, a) -> object:
    """Change only the values given (a PATCH: --quota 3 keeps the guarantee and the limit); a quota that does
    not exist yet is created with the others at guarantee 0, quota 0, no limit. Nothing given is a usage error,
    not a silent no-op that prints the current values (new-user trial 13, F16: README said "exactly these
    values", the tool changed only those given)."""
    if a.guarantee is None and a.quota is None and a.limit is None and not a.no_limit:
        raise UsageError("give at least one of --guarantee, --quota, --limit or --no-limit (only the values given "
                         "change; GET /api/v1/quotas/?queue=...&flavor=... shows the current ones)")
    found, _ = client.get("/api/v1/quotas/", queue=a.queue, flavor=a.flavor)
    limit = None if a.no_limit else a.limit
    # a refused value is named by its flag first, "--quota (quota): ..." (as submit's: flag_keys; trial 25)
    flags = {"guarantee": "--guarantee", "quota": "--quota", "limit": "--no-limit" if a.no_limit else "--limit"}
    try:
        if not found["results"]:
            body = {"queue": a.queue, "flavor": a.flavor, "guarantee": a.guarantee or 0, "quota": a.quota or 0,
                    "limit": limit}
            return client.request("POST", "/api/v1/quotas/", body)[0]
        url = f"/api/v1/quotas/{found['results'][0]['id']}/"
        current, headers = client.request("GET", url)
        etag = headers.get("ETag") or headers.get("Etag")
        body = {k: v for k, v in (("guarantee", a.guarantee), ("quota", a.quota)) if v is not None}
        if a.no_limit or a.limit is not None:
            body["limit"] = limit
        return client.request("PATCH", url, body, headers={"If-Match": etag})[0]
    except ApiError as exc:
        raise ApiError(exc.status, flag_keys(exc.body, flags)) from None


def cmd_set_sharing(client: Client, a) -> object:
    body = {"sharing": a.mode}
    if a.gpus is not None:  # --gpus "" names no GPU: refused here, never read as "every GPU"
        try:
            body["gpus"] = [int(g) for g in a.gpus.split(",")]
        except ValueError:
            raise UsageError(f"--gpus must be GPU indexes separated by commas, e.g. 3,4 (got {a.gpus!r}); "
                             f"leave it out for every GPU of the node") from None
    return client.request("POST", f"/api/v1/nodes/{urllib.parse.quote(a.node, safe='')}/sharing/", body)[0]


def _print(result, a, command: str, now=None) -> None:
    if command == "logs":
        return  # printed as it arrived
    if a.json:
        print(json.dumps(result, indent=2))
    elif command == "list":
        print(_table([_job_line(j, now) for j in result["results"]], JOB_HEADER, table_width(a)))
        if result.get("next"):
            print(f"... {result['count']} jobs in all, {result.get('shown', len(result['results']))} shown: "
                  f"--limit N for more, --all for every one (or filter with --state / --queue / --team)")
    elif command in ("submit", "get", "cancel"):
        print(_table([_job_line(result, now)], JOB_HEADER, table_width(a)))
    elif command == "queues":
        if not result["results"]:  # nothing to show: said on stderr, exit 0 (as `logs` with no output)
            print("gpuctl queues: no queues you may see", file=sys.stderr)
            return
        usage = {u["queue"]: u for u in result.get("usage") or []}
        print(_table([_queue_line(q, usage.get(q["name"])) for q in result["results"]], QUEUE_HEADER,
                     table_width(a)))
    elif command == "nodes":
        if not result["results"]:
            given = [f"{k} {v}" for k, v in (("flavor", a.flavor), ("state", a.state)) if v is not None]
            print("gpuctl nodes: no nodes" + (f" with {' and '.join(given)}" if given else ""), file=sys.stderr)
            return
        print(_table([_node_line(n) for n in result["results"]], NODE_HEADER, table_width(a)))
    elif command == "set-sharing":
        print(f"{result['name']}: " + ", ".join(f"GPU {g['index']} {g['sharing']}" for g in result["gpus"]))
    elif command == "set-quota":
        print(f"{result['queue']}/{result['flavor']}: guarantee {result['guarantee']}, quota {result['quota']}, "
              f"limit {'none' if result['limit'] is None else result['limit']}")


def _gpus_arg(text: str) -> int | float:
    """--gpus: a whole number of GPUs (int), or a fraction of one GPU strictly between 0 and 1 (float)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of GPUs (e.g. 2, or 0.5 of one GPU)") from None
    if value.is_integer() and value >= 0:
        return int(value)
    if 0 < value < 1:
        return value
    raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of GPUs, or a fraction of one GPU from 0.001 to 0.999")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuctl", description="GPU platform command-line client (REST API).")
    p.add_argument("--api", help=f"API base URL (env GPUCTL_API; default {DEFAULT_API})")
    p.add_argument("--token", help="API token (env GPUCTL_TOKEN)")
    p.add_argument("--json", action="store_true", help="print the API's JSON answers")
    sub = p.add_subparsers(dest="command", required=True)
    # --json is accepted after the subcommand too (`gpuctl list --json`): SUPPRESS keeps a --json given
    # before it when the subcommand's is absent
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print the API's JSON answers")
    common.add_argument("--wide", action="store_true", default=argparse.SUPPRESS,
                        help="never cut the job table's last column (piped output is never cut either)")
    common.add_argument("-o", "--output", choices=["wide", "json"], default=argparse.SUPPRESS,
                        help="wide: as --wide; json: as --json")

    s = sub.add_parser("submit", parents=[common], help="submit a job (one role, or --file for the full body)")
    s.add_argument("--file", help="JSON body of POST /api/v1/jobs/ (.yaml / .yml: YAML; '-': standard input)")
    s.add_argument("--queue")
    s.add_argument("--name")
    s.add_argument("--team", help="team slug (default: the queue's)")
    s.add_argument("--role", help="the role's name (default worker)")
    s.add_argument("--tasks", type=int, help="tasks (default 1)")
    s.add_argument("--gpus", type=_gpus_arg,
                   help="GPUs per task (default 1): a whole number, or a fraction of one shared GPU such as 0.5")
    s.add_argument("--cpu-milli", type=int, help="milli-CPU per task (1000 = one core; default none asked)")
    s.add_argument("--memory-mib", type=int, help="memory per task in MiB (default none asked)")
    s.add_argument("--min-available", type=int)
    s.add_argument("--flavor", help="GPU model(s), e.g. H100 or 'H100|A100'")
    s.add_argument("--priority", type=int, help="default 0")
    s.add_argument("--no-preempt", action="store_true", help="not preemptible")
    s.add_argument("--interruptible", action="store_true",
                   help="may be stopped at once, without a grace period: runs on hot spares too")
    s.add_argument("--topology", choices=["none", "soft", "hard"], help="default none")
    s.add_argument("--highest-tier", help="tier number or name (tier-1, nvlink, leaf, spine)")
    s.add_argument("--group-size", type=int, help="sub-group: every this many tasks inside one domain of --group-tier")
    s.add_argument("--group-tier", help="the sub-group's highest tier (number or name)")
    s.add_argument("--numa", choices=["prefer", "single"], help="single: each task's GPUs in one NUMA node, or wait")
    s.add_argument("--time-limit", type=int, help="seconds; the job is stopped when it runs longer "
                                                  "(and backfill can use it)")
    s.add_argument("--command", dest="command_line", metavar="COMMAND", help='what every task runs, one line split like a shell would: '
                                     '"python3 train.py --epochs 3" (or give the argv after --)')
    s.add_argument("--env", action="append", metavar="NAME=VALUE", help="an environment variable (repeatable)")
    s.add_argument("--workdir", help="working directory: an absolute path on the node (blank = the task's own "
                   "directory on the node)")
    s.add_argument("--image", help="container image (needs a node agent with docker or podman)")
    s.add_argument("--max-restarts", type=int, help="restarts of the whole gang after a task fails (default 0)")
    s.add_argument("--completion-role", help="the job succeeds when this role's tasks exit 0 (default: every role)")
    s.add_argument("argv", nargs="*", metavar="-- ARGV", help="the command as separate words, after --")

    s = sub.add_parser("list", parents=[common], help="list jobs you may see")
    s.add_argument("--state", action="append", help="a job state (pending, running, preempting, ...), or "
                   "cancelling / stopping as the STATE column shows them; repeat for several")
    s.add_argument("--queue")
    s.add_argument("--team")
    shown = s.add_mutually_exclusive_group()
    shown.add_argument("--limit", type=int, default=50,
                       help=f"at most this many jobs, newest first (default 50; pages of {PAGE_MAX} are followed)")
    shown.add_argument("--all", action="store_true", help="every job (follows the API's pages)")

    s = sub.add_parser("get", parents=[common], help="one job")
    s.add_argument("id", type=int)

    s = sub.add_parser("logs", parents=[common], help="print a task's output (stdout and stderr)")
    s.add_argument("id", type=int, help="job id")
    s.add_argument("--task", help="task id, or role-index such as worker-1 (default: the job's first task)")
    s.add_argument("--attempt", type=int, help="an earlier attempt (default: the current one)")
    s.add_argument("--raw", action="store_true", help="write the output's bytes as they are on a terminal too "
                   "(by default a terminal gets control characters other than newline and tab shown as ^[ or "
                   "<U+202E>; piped output is always as it is)")
    s.add_argument("--follow", "-f", action="store_true", help="keep printing until the task has ended, then say how "
                   "it and its job ended (exit status 3 when the task or the job failed, 4 when the job was cancelled)")

    s = sub.add_parser("cancel", parents=[common], help="cancel a job")
    s.add_argument("id", type=int)
    s.add_argument("--reason")

    s = sub.add_parser("set-quota", parents=[common], help="create or change a queue's quota for a GPU flavor (platform admins)",
                       description="Change only the values given; the others keep theirs (a new quota: guarantee 0, "
                                   "quota 0, no limit). At least one value is needed.")
    s.add_argument("queue")
    s.add_argument("flavor")
    s.add_argument("--guarantee", type=int)
    s.add_argument("--quota", type=int)
    limit = s.add_mutually_exclusive_group()
    limit.add_argument("--limit", type=int)
    limit.add_argument("--no-limit", action="store_true", help="no cap of its own (the parent's)")

    s = sub.add_parser("set-sharing", parents=[common], help="set a node's GPUs to exclusive, shared (fractions) or auto (platform admins)")
    s.add_argument("node")
    s.add_argument("mode", choices=["exclusive", "shared", "auto"])
    s.add_argument("--gpus", help="GPU indexes, e.g. 3,4 (default: every GPU of the node not in MIG mode)")

    sub.add_parser("queues", parents=[common], help="the queues you may see: parent, team, weight, state, GPUs in "
                   "use, running and pending jobs, quotas per flavor",
                   description="One line per queue (GET /api/v1/queues/) with its live usage (GET /api/v1/"
                               "cluster-metrics/current/: an inner queue's figures are its subtree's; '-' where the "
                               "API gives none). QUOTAS: each flavor's guarantee/quota/limit in GPUs.")

    s = sub.add_parser("nodes", parents=[common], help="the nodes: flavor, state, GPUs, GPUs in use, unhealthy "
                       "GPUs, domain", description="One line per node (GET /api/v1/nodes/). USED: GPU-equivalents "
                       "held by live allocations; UNHEALTHY: the GPUs whose health is not healthy, by index (gpu3,gpu5).")
    s.add_argument("--flavor", help="only the nodes of this GPU flavor, e.g. H100")
    s.add_argument("--state", help="only the nodes in this state: ready, cordoned, draining, not_ready, in_repair, "
                   "validating")
    return p


COMMANDS = {"submit": cmd_submit, "list": cmd_list, "get": cmd_get, "logs": cmd_logs, "cancel": cmd_cancel,
            "set-quota": cmd_set_quota, "set-sharing": cmd_set_sharing, "queues": cmd_queues, "nodes": cmd_nodes}


def main(argv: list[str] | None = None) -> int:
    """Run one gpuctl command; returns the exit status (0 ok, 1 refused by the API, 2 bad usage or the API
    unreachable, 3 `logs --follow` saw the task or job fail, 4 it saw the job cancelled, 130 interrupted)."""
    try:
        a = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse printed the usage and the problem (or --help)
        return exc.code if isinstance(exc.code, int) else 2
    a.api_from, a.api = setting(a.api, "--api", "GPUCTL_API", DEFAULT_API)
    a.token_from, a.token = setting(a.token, "--token", "GPUCTL_TOKEN", "")
    problem = api_problem(a.api, a.api_from) or token_problem(a.token, a.token_from)
    if problem:  # once, for every command: a bad address or token was a traceback (new-user trial 26, F4)
        print(f"gpuctl: {problem}", file=sys.stderr)
        return 2
    output = getattr(a, "output", None)
    a.wide = getattr(a, "wide", False) or output == "wide"
    a.json = a.json or output == "json"
    client = Client(api_base(a.api), a.token)
    try:
        result = COMMANDS[a.command](client, a)
    except ApiError as exc:
        if not isinstance(exc.body, (dict, list)):  # the API answers JSON, even its 404s: an HTML page is not
            # it (new-user trial 12, F16: a wrong base path printed the server's whole 404 page)
            print(f"gpuctl: no GPU platform API at {a.api} (HTTP {exc.status})", file=sys.stderr)
            return 2
        print(f"gpuctl: refused (HTTP {exc.status})", file=sys.stderr)
        if isinstance(exc.body, dict):
            for field, problems in exc.body.items():
                for problem in problems if isinstance(problems, list) else [problems]:
                    print(f"  {field}: {problem}", file=sys.stderr)
        else:
            print(f"  {exc.body}", file=sys.stderr)
        if exc.status == 401 and not a.token:  # "Authentication credentials were not provided." (trial 26, F9)
            print(f"  no API token was given: set GPUCTL_TOKEN or pass --token; POST {api_base(a.api)}/api/v1/"
                  f"auth-token/ with -d username=... --data-urlencode 'password=...' issues one (README, gpuctl), or "
                  f"the admin does", file=sys.stderr)
        elif exc.status == 401:  # a token was sent and refused: "Invalid token." alone said not what to do (s27)
            print(f"  {refused_token_hint(a.token_from, api_base(a.api))}", file=sys.stderr)
        return 1
    except UsageError as exc:
        print(f"gpuctl {a.command}: {exc}", file=sys.stderr)
        return 2
    except Unsuccessful:
        return 3
    except Cancelled:
        return 4
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130
    except BrokenPipeError:  # gpuctl logs 42 | head
        return _reader_left()
    except (urllib.error.URLError, OSError) as exc:
        default = (" (the default address: GPUCTL_API is not set and no --api given)" if a.api_from == "default"
                   else "")  # new-user trial 26, F9: the default was not said to be one
        print(f"gpuctl: cannot reach {a.api}: {getattr(exc, 'reason', None) or exc}{default}", file=sys.stderr)
        return 2
    except json.JSONDecodeError:
        print(f"gpuctl: the answer from {a.api} is not JSON (is it the platform's API address?)", file=sys.stderr)
        return 2
    try:
        _print(result, a, a.command, getattr(client, "cluster_time", None))
        sys.stdout.flush()
    except BrokenPipeError:  # gpuctl list | head -5
        return _reader_left()
    return 0


def _reader_left() -> int:
    """The reader of stdout went away (`| head`): exit 0 quietly, as other Unix tools do."""
    try:  # Python flushes stdout at exit: point it at /dev/null so that does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
