"""Fixtures of the control-plane tests: a real broker process with its metrics endpoint, the
control plane pointed at it, users of each role and API clients authenticated with their
tokens. The database is pytest-django's, on the real PostgreSQL (control/settings_test.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid

import pytest
from broker_process import BrokerProcess, free_port
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
)
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from quotas_support import remove_every_quota
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from api import kafka
from api.permissions import ADMIN, OPERATOR, VIEWER

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_collection_modifyitems(items) -> None:
    """schemathesis names each operation's test `test_x[GET /path/]`, but pytest 9 builds a
    node id's brackets from a parametrization, which schemathesis does not use: every one of
    them gets the id `...::test_x`, and pytest-xdist, which hands tests to its workers by node
    id, would run one operation of them all. Each gets the id its name says (pytest keeps it
    in `_id`, a NodeId)."""
    for item in items:
        original = getattr(item, "originalname", item.name)
        if item.name.startswith(f"{original}[") and item.nodeid.endswith(f"::{original}"):
            item._id = item._id.with_params(item.name[len(original) + 1 : -1])


@pytest.fixture
def client():
    # tests/conftest.py's broker `client` would otherwise shadow pytest-django's.
    return Client()


@pytest.fixture(scope="session")
def control_broker(tmp_path_factory):
    """One broker process for the control-plane tests, with its Prometheus endpoint."""
    metrics_port = free_port()
    proc = BrokerProcess(
        tmp_path_factory.mktemp("control-kafka-logs"),
        f"metrics.listener=http://127.0.0.1:{metrics_port}/metrics",
        # As `make run`'s broker: the pipelines' exactly-once sink needs it.
        "transaction.two.phase.commit.enable=true",
    ).start()
    proc.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    yield proc
    assert proc.stop() == 0, "".join(proc.output)


@pytest.fixture
def broker_settings(settings, control_broker):
    """The control plane pointed at control_broker, with fresh clients."""
    settings.FJORD_BOOTSTRAP = control_broker.bootstrap
    settings.FJORD_METRICS_URL = control_broker.metrics_url
    kafka.reset()
    yield control_broker
    kafka.reset()


@pytest.fixture
def clean_quotas(broker_settings):
    """broker_settings, and every client quota removed after the test: a default entity's
    quota would apply to the other tests' clients."""
    yield broker_settings
    kafka.call(remove_every_quota)


@pytest.fixture(scope="module")
def celery_worker(django_db_setup, django_db_blocker, control_broker, tmp_path_factory):
    """`celery -A control worker` on the test database, the test Redis and control_broker,
    with directories of its own for exports and uploaded imports."""
    with django_db_blocker.unblock():
        name = connection.settings_dict["NAME"]
    export_dir = tmp_path_factory.mktemp("exports")
    import_dir = tmp_path_factory.mktemp("imports")
    pipelines_dir = tmp_path_factory.mktemp("pipelines")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "control.settings_test",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{name}",
        "FJORD_BOOTSTRAP": control_broker.bootstrap,
        "FJORD_EXPORT_DIR": str(export_dir),
        "FJORD_IMPORT_DIR": str(import_dir),
        "FJORD_PIPELINES_DIR": str(pipelines_dir),
        # The pipeline processes the worker spawns: two cores, a task tried twice.
        "FJORD_SPARK_MASTER": "local[2,2]",
        "PYTHONUNBUFFERED": "1",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "control",
            "worker",
            "--pool",
            "solo",
            "--loglevel",
            "INFO",
            "--without-mingle",
            "--without-gossip",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output: list[str] = []
    ready = threading.Event()

    def pump():
        for line in proc.stdout:
            output.append(line)
            if " ready." in line:
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(60) or proc.poll() is not None:
        proc.kill()
        raise RuntimeError("worker did not start:\n" + "".join(output))
    proc.export_dir, proc.import_dir = export_dir, import_dir
    proc.pipelines_dir = pipelines_dir
    yield proc
    proc.terminate()
    proc.wait(30)


@pytest.fixture
def worker_settings(settings, broker_settings, celery_worker):
    """The control plane pointed at control_broker and at celery_worker's directories."""
    settings.FJORD_EXPORT_DIR = celery_worker.export_dir
    settings.FJORD_IMPORT_DIR = celery_worker.import_dir
    settings.FJORD_PIPELINES_DIR = celery_worker.pipelines_dir
    return broker_settings


@pytest.fixture(scope="session")
def acl_broker(tmp_path_factory):
    """A broker with Kafka's StandardAuthorizer, where the control plane and confluent-kafka
    connect over PLAINTEXT as User:ANONYMOUS, a super user."""
    proc = BrokerProcess(
        tmp_path_factory.mktemp("acl-kafka-logs"),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:ANONYMOUS",
    ).start()
    yield proc
    assert proc.stop() == 0, "".join(proc.output)


@pytest.fixture
def acl_settings(settings, acl_broker):
    """The control plane pointed at acl_broker, with fresh clients."""
    settings.FJORD_BOOTSTRAP = acl_broker.bootstrap
    kafka.reset()
    yield acl_broker
    kafka.reset()


@pytest.fixture
def confluent(acl_broker):
    return ConfluentAdmin({"bootstrap.servers": acl_broker.bootstrap})


@pytest.fixture
def confluent_acls(confluent):
    """The bindings confluent-kafka's AdminClient lists for a resource type and name."""

    def described(rtype, name: str) -> list:
        acl_filter = AclBindingFilter(
            rtype,
            name,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        return confluent.describe_acls(acl_filter).result(30)

    return described


@pytest.fixture
def unique():
    """A name no other test uses: tests share the broker."""
    return lambda prefix="t": f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_user(username: str, role: str | None) -> User:
    user = User.objects.create_user(username, password=f"{username}-pw-Secret1")
    if role is not None:
        # get_or_create: transactional tests flush the groups the data migration made.
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


@pytest.fixture
def viewer(db):
    return make_user("vera", VIEWER)


@pytest.fixture
def operator(db):
    return make_user("otto", OPERATOR)


@pytest.fixture
def admin_user(db):
    return make_user("ada", ADMIN)


def token_client(user: User) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return api


@pytest.fixture
def viewer_api(viewer):
    return token_client(viewer)


@pytest.fixture
def operator_api(operator):
    return token_client(operator)


@pytest.fixture
def admin_api(admin_user):
    return token_client(admin_user)


def session_browser(user: User) -> Client:
    """A Django test client logged in with a session, as the console is used."""
    browser = Client()
    browser.force_login(user)
    return browser


@pytest.fixture
def admin_browser(admin_user):
    return session_browser(admin_user)


@pytest.fixture
def viewer_browser(viewer):
    return session_browser(viewer)
