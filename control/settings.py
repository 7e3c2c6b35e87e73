"""Settings for the Fjord control plane, read from the environment (12-factor).

deploy/fjord.env.example lists every variable. Without any of them the control plane refuses
to start: it needs DJANGO_SECRET_KEY, or DJANGO_DEBUG=1 for development (as `make run` asks),
which runs on local defaults: SQLite under var/, in-process channel layer, no Celery worker.
Outside development the defaults are a deployment's behind a TLS-terminating proxy: secure
cookies, HTTPS only, HSTS.
"""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
# Where a single-machine installation keeps its files: SQLite, the broker's logs under
# `make run`, Celery's file queue and beat schedule, exports. One variable moves them all.
VAR_DIR = Path(os.environ.get("FJORD_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _env_list(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    return value in {"1", "true", "yes", "on"} if value else default


# Development mode must be asked for: a deployment that forgets the variable is not one that
# shows tracebacks and settings to whoever triggers an error.
DEBUG = _env_flag("DJANGO_DEBUG", False)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be set (or DJANGO_DEBUG=1 for development, as `make run` "
            "sets it)."
        )
    # Known to everyone, so it signs nothing worth forging: only in development.
    SECRET_KEY = "django-insecure-fjord-local-development-key-never-use-in-production"

# Empty in debug mode means Django's own localhost defaults.
ALLOWED_HOSTS = _env_list("DJANGO_ALLOWED_HOSTS")
CSRF_TRUSTED_ORIGINS = _env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

# Behind a TLS-terminating proxy (deploy/README.md). Each setting is Django's, read from the
# variable of the same name with a DJANGO_ prefix; outside development the defaults are the
# safe ones, and development (plain HTTP on 127.0.0.1) turns them off.
SESSION_COOKIE_SECURE = _env_flag("DJANGO_SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = _env_flag("DJANGO_CSRF_COOKIE_SECURE", not DEBUG)
SECURE_SSL_REDIRECT = _env_flag("DJANGO_SECURE_SSL_REDIRECT", not DEBUG)
# Load balancers and container health checks ask over plain HTTP from inside.
SECURE_REDIRECT_EXEMPT = [r"^api/v1/health/$"]
# A year, as HSTS preload lists ask; the browser then refuses plain HTTP to this host, so a
# first deployment may start lower (DJANGO_SECURE_HSTS_SECONDS=3600) until TLS is settled.
SECURE_HSTS_SECONDS = int(
    os.environ.get("DJANGO_SECURE_HSTS_SECONDS", "0" if DEBUG else "31536000")
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_flag("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
# Preloading commits the registrable domain and all its hosts to HTTPS in every browser: its
# owner's decision (DJANGO_SECURE_HSTS_PRELOAD=1), not one a console on one of its hosts makes.
SECURE_HSTS_PRELOAD = _env_flag("DJANGO_SECURE_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = ["security.W021"]
# The header the proxy sets to say the client's request came over TLS, as
# "X-Forwarded-Proto:https". Only for a web process that nothing but the proxy can reach (and
# that overwrites the header): a client reaching it directly could claim HTTPS.
if _proxy_header := os.environ.get("DJANGO_SECURE_PROXY_SSL_HEADER", "").strip():
    _header, _, _value = _proxy_header.partition(":")
    SECURE_PROXY_SSL_HEADER = (
        "HTTP_" + _header.strip().upper().replace("-", "_"),
        _value.strip() or "https",
    )

INSTALLED_APPS = [
    # daphne first: its runserver replaces Django's with the ASGI one.
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "api",
    "webui",
    "pipelines",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Serves static files from the web process itself, so no separate file server is needed.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, so that it sees the user DRF's token authentication resolved.
    "api.audit.AuditMiddleware",
]

ROOT_URLCONF = "control.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "webui.context_processors.console",
            ],
        },
    },
]

WSGI_APPLICATION = "control.wsgi.application"
ASGI_APPLICATION = "control.asgi.application"

DATABASES = {
    "default": dj_database_url.config(default=f"sqlite:///{VAR_DIR / 'control.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web process, the worker and beat all write (audit, metric history, job progress):
    # WAL lets readers run beside a writer, IMMEDIATE transactions queue writers instead of
    # failing them with "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# WhiteNoise warns on every start while collectstatic has not made it.
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Hashed, compressed files need `collectstatic`, which deployments run and debug mode skips.
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# Logs go to stderr in every mode, where daphne, systemd and docker collect them, with any
# credential in a message or a traceback (a database URL, a password option) masked.
LOG_LEVEL = os.environ.get("DJANGO_LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"redacted": {"()": "broker.redaction.RedactingFormatter"}},
    "filters": {"routine_tasks": {"()": "control.log_filters.RoutineTasks"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "redacted"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Django's own debug-only console handler would print every record a second time.
        "django": {"handlers": []},
        # Where Celery says a task was sent (beat), received and succeeded (worker). Celery sets
        # the root logger's level from its own --loglevel, after Django: DJANGO_LOG_LEVEL=DEBUG
        # reaches these through a level of their own.
        **{
            name: {
                "filters": ["routine_tasks"],
                **({"level": "DEBUG"} if LOG_LEVEL == "DEBUG" else {}),
            }
            for name in ("celery.beat", "celery.worker.strategy", "celery.app.trace")
        },
    },
}

REST_FRAMEWORK = {
    # Token first: an unauthenticated API call then gets 401 with WWW-Authenticate, not 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Endpoints are private unless a view opts out, as the health check does; what a user may
    # do beyond reading is decided by their role (api.permissions).
    "DEFAULT_PERMISSION_CLASSES": ["api.permissions.RolePermission"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Fjord control plane API",
    "DESCRIPTION": "Topics, ACLs, consumer groups, transactions, users, metrics and jobs of a "
    "Fjord cluster. Cluster state lives in the broker; every call goes through the Kafka "
    "Admin protocol.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its docs describe the API, not the cluster: automation fetches them
    # before it has a token.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    # Swagger UI and Redoc from drf-spectacular-sidecar's static files, never a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

LOGIN_URL = "webui:login"
LOGIN_REDIRECT_URL = "webui:home"
LOGOUT_REDIRECT_URL = "webui:login"

REDIS_URL = os.environ.get("REDIS_URL", "")

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    # Reaches only consumers in the same process: enough for the single daphne of `make run`.
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Without Redis, Celery's tasks travel as files under var/celery: the worker and beat of
# `make run` then need no external service.
CELERY_BROKER_URL = REDIS_URL or "filesystem://"
if not REDIS_URL:
    CELERY_QUEUE_DIR = VAR_DIR / "celery" / "queue"
    CELERY_QUEUE_DIR.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_QUEUE_DIR),
        "data_folder_out": str(CELERY_QUEUE_DIR),
        "control_folder": str(CELERY_QUEUE_DIR),
        "store_processed": False,
    }
if not REDIS_URL:
    # Remote control broadcasts over the queue, which the file transport cannot fan out.
    CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
# Job state and progress live in the database (api.models.Job), so no result backend is kept.
CELERY_TASK_IGNORE_RESULT = True
# A worker process busy with a long job must not hold samples it prefetched until they expire:
# each process takes one task at a time, and the other keeps sampling.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# Seconds between two samples of the broker's metrics, and how long samples are kept.
FJORD_METRICS_INTERVAL = float(os.environ.get("FJORD_METRICS_INTERVAL", "1"))
FJORD_METRICS_RETENTION = int(os.environ.get("FJORD_METRICS_RETENTION", str(24 * 3600)))
# The sampler must run where it reaches the dashboards' websocket groups: in Celery beat when
# Redis carries the channel layer between processes, in the web process itself otherwise.
FJORD_SAMPLER = os.environ.get("FJORD_SAMPLER", "beat" if REDIS_URL else "web")
CELERY_BEAT_SCHEDULE = {
    "prune-metric-history": {"task": "api.tasks.prune_metric_history", "schedule": 60.0},
    "check-pipeline-runs": {"task": "pipelines.tasks.check_pipeline_runs", "schedule": 5.0},
}
if FJORD_SAMPLER == "beat":
    CELERY_BEAT_SCHEDULE["sample-broker-metrics"] = {
        "task": "api.tasks.sample_broker_metrics",
        "schedule": FJORD_METRICS_INTERVAL,
        # A sample older than the next one is worth nothing.
        "options": {"expires": FJORD_METRICS_INTERVAL},
    }

# Each pipeline's checkpoint and its runs' logs: FJORD_PIPELINES_DIR/<id>/.
FJORD_PIPELINES_DIR = Path(os.environ.get("FJORD_PIPELINES_DIR", str(VAR_DIR / "pipelines")))
# A run whose process has not reported for this long is failed (its process died).
FJORD_PIPELINE_HEARTBEAT_TIMEOUT = float(os.environ.get("FJORD_PIPELINE_HEARTBEAT_TIMEOUT", "120"))

# Exported topics are written here and downloaded through the jobs API.
FJORD_EXPORT_DIR = Path(os.environ.get("FJORD_EXPORT_DIR", str(VAR_DIR / "exports")))
# Uploaded files wait here for their import job, which removes them when it ends.
FJORD_IMPORT_DIR = Path(os.environ.get("FJORD_IMPORT_DIR", str(VAR_DIR / "imports")))

# Where the control plane finds the broker: Kafka's bootstrap.servers, and the broker's
# Prometheus endpoint.
FJORD_BOOTSTRAP = os.environ.get("FJORD_BOOTSTRAP", "127.0.0.1:9092")
FJORD_METRICS_URL = os.environ.get("FJORD_METRICS_URL", "http://127.0.0.1:9308/metrics")
# How the control plane authenticates to the broker: Kafka's security.protocol, sasl.mechanism
# and credentials, and PEM files for SSL and SASL_SSL listeners.
FJORD_SECURITY_PROTOCOL = os.environ.get("FJORD_SECURITY_PROTOCOL", "PLAINTEXT")
FJORD_SASL_MECHANISM = os.environ.get("FJORD_SASL_MECHANISM", "PLAIN")
FJORD_SASL_USERNAME = os.environ.get("FJORD_SASL_USERNAME") or None
FJORD_SASL_PASSWORD = os.environ.get("FJORD_SASL_PASSWORD") or None
FJORD_SSL_CAFILE = os.environ.get("FJORD_SSL_CAFILE") or None
FJORD_SSL_CERTFILE = os.environ.get("FJORD_SSL_CERTFILE") or None
FJORD_SSL_KEYFILE = os.environ.get("FJORD_SSL_KEYFILE") or None
