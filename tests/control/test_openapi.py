"""The OpenAPI schema is valid, and no generated request, valid or not, gets a 500.

schemathesis drives the WSGI application in-process with the admin's token (every endpoint is
reachable) against a broker of its own: it creates and deletes topics, ACLs, users and broker
configs at random, which must not disturb the other tests' broker.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from broker_process import BrokerProcess
from django.core import signals
from django.core.management import call_command
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from rest_framework.authtoken.models import Token
from schemathesis.core.failures import ServerError

from api import kafka


def test_schema_is_valid_openapi_without_warnings(tmp_path):
    out = tmp_path / "schema.yaml"

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))

    assert out.read_text().startswith("openapi: 3")


def test_schema_and_docs_need_no_login(client):
    assert client.get("/api/v1/schema/").status_code == 200
    docs = client.get("/api/v1/docs/")
    assert docs.status_code == 200
    # Swagger UI comes from the sidecar package's static files, never a CDN.
    assert (
        b"cdn" not in docs.content.lower() and b"/static/drf_spectacular_sidecar/" in docs.content
    )


@pytest.fixture(scope="module")
def fuzzed_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("fuzzed-kafka-logs")).start()
    yield proc
    assert proc.stop() == 0, "".join(proc.output)


@pytest.fixture
def fuzzed_settings(settings, fuzzed_broker, tmp_path):
    settings.FJORD_BOOTSTRAP = fuzzed_broker.bootstrap
    # Generated uploads that pass validation are stored for a job that never runs here.
    settings.FJORD_IMPORT_DIR = tmp_path
    # schemathesis' WSGI transport sends Host: localhost.
    settings.ALLOWED_HOSTS = ["localhost"]
    kafka.reset()
    # As Django's test client does: a request must not close the connection that holds the
    # test's transaction.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)
    kafka.reset()


# A partition is a directory and an open file: generated topics of thousands of partitions
# would spend the run creating them (and once, before the broker bounded them by its open-file
# limit, left it without descriptors for any connection). The counts are kept small here; bad
# ones (0, negative, not numbers) still reach the API, huge ones are refused by the
# serializers' int32 bounds (test_topics_rest.py) and by the broker (test_partition_budget.py).
MAX_GENERATED_PARTITIONS = 64
# A small client quota on a default entity would throttle every later request of the run, the
# control plane's own included; positive quotas are raised above this (the broker's refusals
# of bad values are tested in test_quotas_rest.py).
MIN_GENERATED_QUOTA = 10**9


@schemathesis.hook
def map_body(ctx, body):
    if isinstance(body, dict):
        for field in ("partitions", "count"):
            value = body.get(field)
            if isinstance(value, int) and not isinstance(value, bool):
                body[field] = min(value, MAX_GENERATED_PARTITIONS)
        quotas = body.get("quotas")
        if isinstance(quotas, dict):
            for key, value in quotas.items():
                if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                    quotas[key] = max(value, MIN_GENERATED_QUOTA)
    return body


@schemathesis.check
def no_unexplained_server_error(ctx, response, case) -> None:
    """No 500, ever. A 502, 503 or 504 passes only as a mapped broker answer, with Kafka's
    error name (api.errors): a broker the fuzzing itself exhausted is unavailable, not a bug of
    the API."""
    if response.status_code < 500:
        return
    try:
        body = response.json()
    except ValueError:
        body = None
    explained = response.status_code in (502, 503, 504) and isinstance(body, dict)
    if not (explained and "kafka_error" in body):
        raise ServerError(operation=case.operation.label, status_code=response.status_code)


# Loaded at collection, one test per operation. (schemathesis' lazy from_fixture does not run
# on pytest 9.) The schema view needs no database, so the test database is not needed yet.
# Random broker configs (max.connections=0, a tiny connections.max.idle.ms) can rightly cut
# the control plane off its broker, after which every call is a 503; tests/control/
# test_cluster_rest.py covers that endpoint.
schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", get_wsgi_application()).exclude(
    method="PATCH", path_regex=r"^/api/v1/brokers/"
)


@schema.parametrize()
@hypothesis_settings(
    max_examples=int(os.environ.get("FJORD_SCHEMATHESIS_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@pytest.mark.django_db
def test_no_request_gets_a_server_error(case, fuzzed_settings, admin_user):
    token, _ = Token.objects.get_or_create(user=admin_user)

    case.call_and_validate(
        headers={"Authorization": f"Token {token.key}"}, checks=[no_unexplained_server_error]
    )
