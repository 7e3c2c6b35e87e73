"""Settings read from the environment, checked in fresh interpreters so that each sees only
the variables the test gives it."""

import json
import os
import secrets
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from deploy_files import DEPLOY, compose, environment_file

REPO = Path(__file__).resolve().parents[2]

CONTROL_ENV_VARS = {
    "DATABASE_URL",
    "REDIS_URL",
    "FJORD_BOOTSTRAP",
    "FJORD_METRICS_URL",
}
# Long and random enough for Django's own check of it (security.W009).
SECRET_KEY = secrets.token_urlsafe(50)


def control_env(**values: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in CONTROL_ENV_VARS and not k.startswith("DJANGO_")
    }
    env["DJANGO_SETTINGS_MODULE"] = "control.settings"
    return {**env, **values}


def load_settings(**values: str) -> subprocess.CompletedProcess[str]:
    script = (
        "import json, django\n"
        "from django.conf import settings\n"
        "django.setup()\n"
        "print(json.dumps({'debug': settings.DEBUG, 'hosts': settings.ALLOWED_HOSTS,"
        " 'db': settings.DATABASES['default'], 'broker_url': settings.CELERY_BROKER_URL,"
        " 'layer': settings.CHANNEL_LAYERS['default']['BACKEND'],"
        " 'bootstrap': settings.FJORD_BOOTSTRAP, 'metrics': settings.FJORD_METRICS_URL,"
        " 'secure': {name: getattr(settings, name, None) for name in ("
        "'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', 'SECURE_SSL_REDIRECT',"
        " 'SECURE_HSTS_SECONDS', 'SECURE_HSTS_INCLUDE_SUBDOMAINS', 'SECURE_PROXY_SSL_HEADER')}},"
        " default=str))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=control_env(**values),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_without_a_secret_key_only_development_starts():
    result = load_settings()

    assert result.returncode != 0
    assert "ImproperlyConfigured: DJANGO_SECRET_KEY must be set" in result.stderr


def test_debug_is_off_and_the_deployment_secure_unless_development_is_asked_for():
    result = load_settings(DJANGO_SECRET_KEY=SECRET_KEY)

    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded["debug"] is False
    assert loaded["secure"] == {
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31536000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        # Trusted only when the deployment says which header its proxy sets.
        "SECURE_PROXY_SSL_HEADER": None,
    }


def test_the_proxy_ssl_header_comes_from_the_environment():
    result = load_settings(
        DJANGO_SECRET_KEY=SECRET_KEY, DJANGO_SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto:https"
    )

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["secure"]["SECURE_PROXY_SSL_HEADER"] == [
        "HTTP_X_FORWARDED_PROTO",
        "https",
    ]


def test_development_mode_is_asked_for_and_runs_on_local_defaults():
    result = load_settings(DJANGO_DEBUG="1")

    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded["debug"] is True
    assert loaded["db"]["ENGINE"] == "django.db.backends.sqlite3"
    assert loaded["db"]["NAME"] == str(REPO / "var" / "control.sqlite3")
    assert loaded["broker_url"] == "filesystem://"
    assert loaded["layer"] == "channels.layers.InMemoryChannelLayer"
    assert loaded["bootstrap"] == "127.0.0.1:9092"
    assert loaded["metrics"] == "http://127.0.0.1:9308/metrics"
    # Plain HTTP on 127.0.0.1.
    assert not any(loaded["secure"].values())


def test_production_settings_come_from_the_environment():
    result = load_settings(
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY="a-real-secret",
        DJANGO_ALLOWED_HOSTS="fjord.example.com, console.example.com",
        DATABASE_URL="postgres://fjord:pw@db.example.com:5432/fjord",
        REDIS_URL="redis://cache.example.com:6379/0",
        FJORD_BOOTSTRAP="kafka-1:9092,kafka-2:9092",
    )

    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded["debug"] is False
    assert loaded["hosts"] == ["fjord.example.com", "console.example.com"]
    assert loaded["db"]["ENGINE"] == "django.db.backends.postgresql"
    assert (loaded["db"]["HOST"], loaded["db"]["NAME"]) == ("db.example.com", "fjord")
    assert loaded["broker_url"] == "redis://cache.example.com:6379/0"
    assert loaded["layer"] == "channels_redis.core.RedisChannelLayer"
    assert loaded["bootstrap"] == "kafka-1:9092,kafka-2:9092"


def test_production_refuses_to_start_without_a_secret_key():
    result = load_settings(DJANGO_DEBUG="0")

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


def deployment_environments() -> dict[str, dict[str, str]]:
    """The control plane's environment in each of deploy/'s ways to run it, given what their
    comments ask the operator for."""
    given = {"DJANGO_SECRET_KEY": SECRET_KEY, "POSTGRES_PASSWORD": "pg-secret"}
    given |= {"FJORD_SASL_PASSWORD": "control-secret", "FJORD_BROKER_PASSWORD": "broker-secret"}
    systemd = environment_file(DEPLOY / "fjord.env.example") | {"DJANGO_SECRET_KEY": SECRET_KEY}
    return {
        "systemd (fjord.env.example)": systemd,
        "compose.yaml": compose("compose.yaml", variables=given)["services"]["web"]["environment"],
        "compose.cluster.yaml": compose("compose.yaml", "compose.cluster.yaml", variables=given)[
            "services"
        ]["web"]["environment"],
    }


@pytest.mark.parametrize("deployment", sorted(deployment_environments()))
def test_check_deploy_is_clean_with_the_settings_deploy_uses(deployment):
    # Compose passes a variable without a value on from its own environment: none here.
    env = {k: str(v) for k, v in deployment_environments()[deployment].items() if v is not None}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO,
        env=control_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.fixture
def postgres_database():
    """A throwaway database on the local PostgreSQL, dropped afterwards; yields its URL."""
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
    except OSError:
        pytest.skip("nothing answers on 127.0.0.1:5432 (make test starts a throwaway PostgreSQL)")
    errors = []
    for user in ("postgres", "root"):
        try:
            admin = psycopg.connect(
                host="127.0.0.1", port=5432, user=user, dbname="postgres", autocommit=True
            )
        except psycopg.OperationalError as exc:
            errors.append(f"{user}: {exc}")
            continue
        name = f"fjord_test_{uuid.uuid4().hex[:12]}"
        with admin:
            admin.execute(f'CREATE DATABASE "{name}"')
            try:
                yield f"postgres://{user}@127.0.0.1:5432/{name}"
            finally:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        return
    pytest.fail("PostgreSQL on 127.0.0.1:5432 accepts neither user: " + "; ".join(errors))


def test_migrate_runs_on_postgresql_from_database_url(postgres_database):
    result = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=REPO,
        env=control_env(DATABASE_URL=postgres_database, DJANGO_SECRET_KEY=SECRET_KEY),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    with psycopg.connect(postgres_database) as conn:
        applied = conn.execute(
            "SELECT count(*) FROM django_migrations WHERE app IN ('auth', 'sessions')"
        ).fetchone()[0]
    assert applied > 0


@pytest.mark.django_db
def test_plain_http_is_redirected_to_https_but_health_checks(settings, client):
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

    assert client.get("/api/v1/topics/").headers["Location"].startswith("https://")
    # Load balancers and container health checks ask over plain HTTP from inside.
    assert client.get("/api/v1/health/").status_code != 301
    # Through the TLS proxy: served (here refused for want of a login).
    assert client.get("/api/v1/topics/", headers={"X-Forwarded-Proto": "https"}).status_code == 401
