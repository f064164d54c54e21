"""Settings: everything that differs between a laptop and production comes from the environment.

DATABASE_URL  default sqlite:///<repo>/db.sqlite3 (the embedded default); postgres://... in production.
REDIS_URL     Celery broker; unset = no broker, the in-process scheduling loop runs cycles instead.
SECRET_KEY, ALLOWED_HOSTS, DEBUG, SCHEDULER_CYCLE_SECONDS.
"""
import os
import shlex
from datetime import timedelta
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent.parent  # the repository root

DEBUG = os.environ.get("DEBUG", "0").lower() in {"1", "true", "yes"}
PRODUCTION = bool(os.environ.get("DJANGO_PRODUCTION"))
SECRET_KEY = os.environ.get("SECRET_KEY", "").strip() or "dev-only-insecure-key-change-me"
if PRODUCTION and not os.environ.get("SECRET_KEY", "").strip():
    raise RuntimeError("SECRET_KEY must be set (non-empty) when DJANGO_PRODUCTION=1")
ALLOWED_HOSTS = [h for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "gpuplatform.apps.AdminConfig",  # django.contrib.admin, its sign-in redirect the pages' (login.AdminSite)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",  # API tokens stored as a SHA-512 digest, with an expiry (services/tokens.py)
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI / Redoc served from our static files (no CDN)
    "csp",
    "gpuplatform.apps.GpuPlatformConfig",
    "frontend",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "gpuplatform.inputs.MethodNotAllowedMiddleware",  # a 405 with a body (JSON on the JSON endpoints) and Allow
    "gpuplatform.inputs.InputGuardMiddleware",  # 413 / 400 before any parsing (the one input normaliser)
    "gpuplatform.inputs.DatabaseUnavailableMiddleware",  # database lost -> 503 JSON + Retry-After
    "csp.middleware.CSPMiddleware",  # Content-Security-Policy (CONTENT_SECURITY_POLICY below)
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "gpuplatform.inputs.PageRefusalMiddleware",  # a page's PermissionDenied -> the 403 page with its reason
]

ROOT_URLCONF = "gpuplatform.urls"
WSGI_APPLICATION = "gpuplatform.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "frontend.context_processors.platform",
            ]
        },
    }
]


def database_config(url: str) -> dict:
    """Django's DATABASES entry for a database URL (postgres://..., sqlite:///path), with this project's options.
    Also used by the benchmarks that point an already configured process at another database."""
    config = dj_database_url.parse(
        url,
        conn_max_age=int(os.environ.get("DB_CONN_MAX_AGE", "0")),
        conn_health_checks=True,  # a persistent connection is checked before reuse (PostgreSQL restarted)
    )
    if config["ENGINE"].endswith("postgresql"):
        # A stopped or unreachable server answers within seconds (-> 503), never after the OS's TCP timeout.
        # DB_CONNECT_TIMEOUT: seconds (default 3); .ci/run gives more on its loaded 2-core machine, where a
        # connection to a live server once took longer than 3 s (a test's set-up failed on it, session 26).
        config.setdefault("OPTIONS", {}).setdefault("connect_timeout", int(os.environ.get("DB_CONNECT_TIMEOUT", "3")))
    if config["ENGINE"].endswith("sqlite3"):
        # The embedded default: a web thread and the in-process loop share one file.
        config.setdefault("OPTIONS", {}).update({"timeout": 30, "transaction_mode": "IMMEDIATE"})
        # Django's backend, with BEGIN IMMEDIATE retried on a lock SQLite does not wait for itself
        # (dbbackends/sqlite3/base.py): a concurrent writer queues instead of answering 503.
        config["ENGINE"] = "gpuplatform.dbbackends.sqlite3"
    return config


DATABASES = {"default": database_config(os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}

# Request bodies: refused with 413 above this size before parsing (gpuplatform/inputs.py); Django's own
# form-parsing cap agrees.
REQUEST_BODY_MAX_BYTES = int(os.environ.get("REQUEST_BODY_MAX_BYTES", str(1 << 20)))
DATA_UPLOAD_MAX_MEMORY_SIZE = REQUEST_BODY_MAX_BYTES

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [  # also with DEBUG on: a password set in development must pass too
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Brute-force lock-out of the token endpoint and the login page (gpuplatform/auth_throttle.py).
AUTH_LOCKOUT_USER_FAILURES = int(os.environ.get("AUTH_LOCKOUT_USER_FAILURES", "10"))
AUTH_LOCKOUT_ADDRESS_FAILURES = int(os.environ.get("AUTH_LOCKOUT_ADDRESS_FAILURES", "50"))
AUTH_LOCKOUT_USER_ANY_ADDRESS_FAILURES = int(os.environ.get(
    "AUTH_LOCKOUT_USER_ANY_ADDRESS_FAILURES", str(10 * AUTH_LOCKOUT_USER_FAILURES)))
AUTH_LOCKOUT_WINDOW_SECONDS = int(os.environ.get("AUTH_LOCKOUT_WINDOW_SECONDS", "900"))
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
]

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
# HTTPS: behind a TLS-terminating proxy set SECURE_SSL=1 (redirect to https, HSTS for a year with
# subdomains and preload); the proxy must send X-Forwarded-Proto. `manage.py check --deploy` is clean with
# DJANGO_PRODUCTION=1 SECURE_SSL=1 and a long SECRET_KEY.
if os.environ.get("SECURE_SSL", "0").lower() in {"1", "true", "yes"}:
    SECURE_SSL_REDIRECT = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]  # probes inside the cluster speak http
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# /metrics needs `Authorization: Bearer <METRICS_TOKEN>` when set; with DJANGO_PRODUCTION=1 it is never
# open: without a token it answers 403 (gpuplatform/prometheus.py).
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "").strip()
# Content Security Policy (django-csp): scripts and styles from this site only, no eval. The pages load
# plotly.js's strict bundle (frontend/static/vendor/plotly-strict.min.js: its WebGL traces, the topology
# zoom's scattergl, use precompiled shaders instead of `new Function`); plotly needs inline styles (it
# styles the SVG it draws).
CONTENT_SECURITY_POLICY = {"DIRECTIVES": {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:", "blob:"],
    "font-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "worker-src": ["'self'", "blob:"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}}

# API tokens (django-rest-knox): only a hash is stored; `Authorization: Token <token>` as before. Lifetimes
# in days: tokens people ask for (POST /api/v1/auth-token/) and node-agent tokens (manage.py agent_token).
API_TOKEN_TTL_DAYS = float(os.environ.get("API_TOKEN_TTL_DAYS", "30"))
AGENT_TOKEN_TTL_DAYS = float(os.environ.get("AGENT_TOKEN_TTL_DAYS", "365"))
API_TOKENS_PER_USER = int(os.environ.get("API_TOKENS_PER_USER", "20"))  # unexpired tokens one user may hold
REST_KNOX = {"TOKEN_TTL": timedelta(days=API_TOKEN_TTL_DAYS), "AUTH_HEADER_PREFIX": "Token", "AUTO_REFRESH": False}

REST_FRAMEWORK = {
    # JSON whose nesting overflows the parser's recursion is a 400 like any other malformed body (api/parsers.py)
    "DEFAULT_PARSER_CLASSES": ["gpuplatform.api.parsers.JSONParser", "rest_framework.parsers.FormParser",
                               "rest_framework.parsers.MultiPartParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # knox's, with a token that is not UTF-8 refused as any wrong one (api/authentication.py). Scripts, CI,
        # the node agent; first, so a 401 carries its WWW-Authenticate
        "gpuplatform.api.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",  # the browser (CSRF enforced)
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "gpuplatform.api.schema.AutoSchema",  # + Idempotency-Key, error shapes
    # KnownQueryParams first: an unknown parameter on a list is a 400 naming it (api/filters.py)
    "DEFAULT_FILTER_BACKENDS": ["gpuplatform.api.filters.KnownQueryParams",
                                "django_filters.rest_framework.DjangoFilterBackend",
                                "gpuplatform.api.filters.StrictOrderingFilter"],  # ?ordering=nope: a 400
    "DEFAULT_PAGINATION_CLASS": "gpuplatform.api.pagination.StrictLimitOffsetPagination",  # jobs, events: keyset
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_RATES": {"job-submit": os.environ.get("JOB_SUBMIT_THROTTLE", "120/min"),
                               "what-if": os.environ.get("WHAT_IF_THROTTLE", "30/min")},  # per user
    "EXCEPTION_HANDLER": "gpuplatform.api.exceptions.exception_handler",
    # ?format= naming no renderer is a 400 naming `format`, not DRF's 404 (api/negotiation.py)
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "gpuplatform.api.negotiation.StrictFormatNegotiation",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU platform control plane API",
    "DESCRIPTION": "Teams, queues and quotas, nodes and topology, jobs, audit events, cluster metrics and "
                   "scheduler cycles. Authenticate with `Authorization: Token <key>`; quota and queue "
                   "updates need `If-Match: <ETag>`. Units: GPUs, millicores, MiB, seconds.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "gpuplatform.api.schema.add_error_responses"],
    # a queue's state choices appear in Queue and QueueChanged (PATCH's answer): one named enum, not "State332Enum"
    "ENUM_NAME_OVERRIDES": {"QueueStateEnum": "gpuplatform.models.queues.Queue.State"},
}
# A creating POST's Idempotency-Key is remembered per user this long (api/idempotency.py)
IDEMPOTENCY_KEY_TTL_SECONDS = int(os.environ.get("IDEMPOTENCY_KEY_TTL_SECONDS", "86400"))

# --- Celery and the scheduling loop -------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
CELERY_BROKER_URL = REDIS_URL or "memory://"
# The shared cache (throttles, login lock-outs) on the same Redis, failing open (gpuplatform/cache.py).
CACHES = {"default": {
    "BACKEND": "gpuplatform.cache.FailOpenRedisCache", "LOCATION": REDIS_URL, "KEY_PREFIX": "gpuplatform",
    "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
}} if REDIS_URL else {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
# No result backend: nothing waits on a task's result in production, and a result backend's reconnects
# were what blocked submissions during a Redis outage. Tests that .get() a result set this variable.
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or None
# A stopped broker is noticed within about a second, never after minutes of reconnect attempts.
CELERY_BROKER_CONNECTION_TIMEOUT = 1.0
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 1}
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 60
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
SCHEDULER_CYCLE_SECONDS = float(os.environ.get("SCHEDULER_CYCLE_SECONDS", "5"))
# rescheduling moves migratable jobs to unblock jobs waiting on fragmentation (docs/rescheduling.md); "0" = off
SCHEDULER_RESCHEDULE = os.environ.get("SCHEDULER_RESCHEDULE", "1") != "0"
# Fair-share memory: queues are ordered by usage decayed with this half-life (Slurm's
# PriorityDecayHalfLife), so a team that burned the cluster yesterday yields today. Unset = off.
# decayed queue usage for fair share with memory, on by default with Slurm's PriorityDecayHalfLife default of
# 7 days; SCHEDULER_USAGE_HALF_LIFE_SECONDS=0 turns it off (queues ordered by live usage only)
SCHEDULER_USAGE_HALF_LIFE_SECONDS = (float(os.environ["SCHEDULER_USAGE_HALF_LIFE_SECONDS"]) or None) \
    if os.environ.get("SCHEDULER_USAGE_HALF_LIFE_SECONDS") else 7 * 24 * 3600.0
# Job lifecycle and fault recovery (gpuplatform/scheduling/release.py and failures.py, gpuplatform/lifecycle.py).
# A task bound on a node agent's node stays "bound" until the agent reports its process started; a gang
# with no task start reported for GANG_START_TIMEOUT_SECONDS is requeued with backoff (docs/execution.md).
# Tasks on simulated nodes (imported inventories, the trace demo) and trace jobs count as running at once.
GANG_START_TIMEOUT_SECONDS = float(os.environ.get("GANG_START_TIMEOUT_SECONDS", "300"))
# Forecast (issue #15, gpuplatform/scheduling/forecast.py): at most every FORECAST_SECONDS (0 = off), to a
# horizon of FORECAST_HORIZON_SECONDS, at most FORECAST_MAX_CYCLES engine cycles per pass.
FORECAST_SECONDS = float(os.environ.get("FORECAST_SECONDS", "60"))
FORECAST_HORIZON_SECONDS = float(os.environ.get("FORECAST_HORIZON_SECONDS", str(7 * 86400)))
FORECAST_MAX_CYCLES = int(os.environ.get("FORECAST_MAX_CYCLES", "400"))
# Federation (issue #22, gpuplatform/federation, docs/federation.md). FEDERATION_ROLE: "worker" (a cluster of its
# own; the default) or "manager" (holds teams, queues and quotas, dispatches to member clusters, no nodes).
FEDERATION_ROLE = os.environ.get("FEDERATION_ROLE", "worker")
FEDERATION_SYNC_SECONDS = float(os.environ.get("FEDERATION_SYNC_SECONDS", "30"))
DISPATCH_TIMEOUT = float(os.environ.get("DISPATCH_TIMEOUT", "600"))  # s a dispatched job waits before a move
WORKER_LOST_SECONDS = float(os.environ.get("WORKER_LOST_SECONDS", "900"))  # unreachable longer -> lost (MultiKueue's)
FEDERATION_HTTP_TIMEOUT = float(os.environ.get("FEDERATION_HTTP_TIMEOUT", "5"))
FEDERATION_USE_WHATIF = os.environ.get("FEDERATION_USE_WHATIF", "1") == "1"  # ask members' forecast for the start
# What-if requests per manager round at most (dispatch.ForecastCache: answers cached per member, job shape, queue)
FEDERATION_FORECAST_PROBES = int(os.environ.get("FEDERATION_FORECAST_PROBES", "64"))
FEDERATION_TOKEN_KEY = os.environ.get("FEDERATION_TOKEN_KEY", "")  # encrypts member tokens (default: SECRET_KEY)
HEARTBEAT_TIMEOUT_SECONDS = float(os.environ.get("HEARTBEAT_TIMEOUT_SECONDS", "60"))  # silent longer -> not_ready
NODE_FAILURE_GRACE_SECONDS = float(os.environ.get("NODE_FAILURE_GRACE_SECONDS", "120"))  # not_ready longer -> tasks fail
# A heartbeat whose node clock is further than this (366 days) from the server's is still taken (liveness is the
# server's receive time) but its offset is not kept, and the node is flagged (services.nodes.record_heartbeat). A
# clock months off is a real, if wrong, clock whose offset telemetry is shifted by; years off (9999, 0001) is not
NODE_CLOCK_MAX_OFFSET_SECONDS = float(os.environ.get("NODE_CLOCK_MAX_OFFSET_SECONDS", str(366 * 86400)))
# The repair path's validation check (docs/diagnosis.md): an argv the node's agent runs when an admin starts
# validation without a command of their own (e.g. "dcgmi diag -r 2"); empty = the heartbeat check only.
NODE_VALIDATION_COMMAND = shlex.split(os.environ.get("NODE_VALIDATION_COMMAND", ""))
REQUEUE_BACKOFF_SECONDS = float(os.environ.get("REQUEUE_BACKOFF_SECONDS", "60"))  # doubles per own failure (lifecycle)
REQUEUE_BACKOFF_CAP_SECONDS = float(os.environ.get("REQUEUE_BACKOFF_CAP_SECONDS", "3600"))
FAILURE_CHECK_SECONDS = float(os.environ.get("FAILURE_CHECK_SECONDS", "15"))
# Execution (gpuplatform/execution, docs/execution.md): how often agents poll their assignments, the grace
# an agent gives a task that is no longer assigned, and the task output kept per task attempt.
AGENT_POLL_SECONDS = float(os.environ.get("AGENT_POLL_SECONDS", "2"))
AGENT_STOP_GRACE_SECONDS = float(os.environ.get("AGENT_STOP_GRACE_SECONDS", "30"))

# Slurm backend (gpuplatform/slurm, docs/slurm.md): nodes whose executor is "slurm" run their gangs as Slurm
# jobs in SLURM_PARTITION (the partition the platform owns). SLURM_MODE: "placement" (the cycle picks the
# nodes, --nodelist) or "admission" (Slurm picks them; the backend records where). SLURM_OUTPUT_DIR: a
# directory shared by the platform and the Slurm nodes (per-task output, launchers). A job Slurm has not
# started after SLURM_START_TIMEOUT seconds is cancelled and its gang requeued. SLURM_JOBCOMP_FILE: the
# cluster's jobcomp/filetxt file (ends missed while the backend was down); blank = squeue only.
SLURM_CONF = os.environ.get("SLURM_CONF", "")
SLURM_PARTITION = os.environ.get("SLURM_PARTITION", "gpuplatform")
SLURM_MODE = os.environ.get("SLURM_MODE", "placement")
SLURM_OUTPUT_DIR = os.environ.get("SLURM_OUTPUT_DIR", str(BASE_DIR / "slurm-output"))
SLURM_START_TIMEOUT = float(os.environ.get("SLURM_START_TIMEOUT", "120"))
SLURM_JOBCOMP_FILE = os.environ.get("SLURM_JOBCOMP_FILE", "")
SLURM_GPU_FLAVOR = os.environ.get("SLURM_GPU_FLAVOR", "GPU")
SLURM_POLL_SECONDS = float(os.environ.get("SLURM_POLL_SECONDS", "1"))
# SLURM_TOPOLOGY_CONF: the Slurm cluster's topology.conf (or topology.yaml); the backend's node sync imports it
# into the domain tree (clusterspec.importers.topology, services.apply_topology). "" = no import.
SLURM_TOPOLOGY_CONF = os.environ.get("SLURM_TOPOLOGY_CONF", "")
# GPU telemetry and the GPU-hour ledger (docs/telemetry.md, DESIGN section 14)
TELEMETRY_SECONDS = float(os.environ.get("TELEMETRY_SECONDS", "10"))  # agent sample period
TELEMETRY_RAW_HOURS = float(os.environ.get("TELEMETRY_RAW_HOURS", "6"))  # raw samples kept this long
TELEMETRY_MINUTE_DAYS = float(os.environ.get("TELEMETRY_MINUTE_DAYS", "7"))  # 1-minute means kept this long
TELEMETRY_QUARTER_DAYS = float(os.environ.get("TELEMETRY_QUARTER_DAYS", "90"))  # 15-minute means kept this long
TELEMETRY_MAX_ROWS_PER_CALL = int(os.environ.get("TELEMETRY_MAX_ROWS_PER_CALL", "2000"))
IDLE_SM_PERCENT = float(os.environ.get("IDLE_SM_PERCENT", "5"))
IDLE_MINUTES = float(os.environ.get("IDLE_MINUTES", "30"))
TASK_LOG_MAX_BYTES = int(os.environ.get("TASK_LOG_MAX_BYTES", str(1 << 20)))
TASK_LOG_CHUNK_MAX_BYTES = 65536
TASK_LOG_READ_MAX_BYTES = 65536
# Task names, not import paths: the tasks live in gpuplatform/scheduling/tasks.py and keep the names they
# were first registered under, which queued messages and beat schedules carry.
# Each periodic message expires after one period (new-user trial 14, F10): while no worker consumes, beat's
# messages are dropped when a worker comes back instead of running the whole backlog back to back.
CELERY_BEAT_SCHEDULE = {
    "scheduling-cycle": {"task": "scheduler.tasks.run_scheduling_cycle", "schedule": SCHEDULER_CYCLE_SECONDS,
                         "options": {"expires": SCHEDULER_CYCLE_SECONDS}},
    "failure-detection": {"task": "scheduler.tasks.detect_node_failures", "schedule": FAILURE_CHECK_SECONDS,
                          "options": {"expires": FAILURE_CHECK_SECONDS}},
    "telemetry-maintenance": {"task": "telemetry.tasks.maintain", "schedule": 60.0, "options": {"expires": 60.0}},
}
if FEDERATION_ROLE == "manager":
    CELERY_BEAT_SCHEDULE["federation-round"] = {"task": "federation.tasks.run_round", "schedule": FEDERATION_SYNC_SECONDS,
                                                "options": {"expires": FEDERATION_SYNC_SECONDS}}
# No scheduling cycle for this long is a stall, shown on /readyz, the pages and pending reasons
# (gpuplatform.scheduling.liveness). 0 = five cycle periods, at least 30 s.
SCHEDULER_STALL_SECONDS = float(os.environ.get("SCHEDULER_STALL_SECONDS", "0"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
