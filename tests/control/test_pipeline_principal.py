"""Each pipeline runs as its own Kafka principal, on a broker with SASL (SCRAM-SHA-512) and
Kafka's StandardAuthorizer, where nothing is allowed without an ACL. The control plane talks to
it as `fjord-control`, a super user; the tests look on over PLAINTEXT as User:ANONYMOUS, the
other super user.

The REST API makes the pipeline's user and exactly its ACLs, changes them with its definition
and deletes them with it; the pipeline's credentials reach nothing outside its definition
(the broker answers TOPIC_AUTHORIZATION_FAILED); a run copies its topic exactly once under
them, with none of the control plane's secrets in its Spark processes, and a run whose
definition was changed behind the API's back fails with the broker's refusal."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

import pytest
from broker_process import BrokerProcess, free_port
from confluent_kafka import KafkaException, Producer
from django.db import connection
from jobs_support import make_topic
from pipelines_support import (
    CommittedReader,
    committed_to_end,
    definition,
    produce,
    run_state,
    upper_case_copy,
    wait_run,
)

from api import kafka
from broker.client import AdminClient, KafkaAdminError, Security
from broker.client.consumer import Consumer
from broker.client.models import AclBindingFilter, TopicPartition
from pipelines import lifecycle, principal
from pipelines.models import Pipeline, PipelineRun

pytestmark = pytest.mark.timeout(300)

CONTROL_USER = "fjord-control"
CONTROL_PASSWORD = f"control-plane-{uuid.uuid4().hex}"
SECRET_KEY = f"django-key-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    plaintext, sasl = free_port(), free_port()
    proc = BrokerProcess(
        tmp_path_factory.mktemp("principal-kafka-logs"),
        f"listeners=PLAINTEXT://127.0.0.1:{plaintext},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-512",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        f"super.users=User:ANONYMOUS;User:{CONTROL_USER}",
        "transaction.two.phase.commit.enable=true",
        port=plaintext,
    ).start()

    async def control_user() -> None:
        async with AdminClient(proc.bootstrap) as admin:
            await admin.upsert_user_scram_credential(CONTROL_USER, CONTROL_PASSWORD)

    asyncio.run(control_user())
    proc.sasl_bootstrap = f"127.0.0.1:{sasl}"
    yield proc
    assert proc.stop() == 0, "".join(proc.output)


@pytest.fixture
def secured(settings, sasl_broker, tmp_path):
    """The control plane on the SASL listener as fjord-control."""
    settings.FJORD_BOOTSTRAP = sasl_broker.sasl_bootstrap
    settings.FJORD_SECURITY_PROTOCOL = "SASL_PLAINTEXT"
    settings.FJORD_SASL_MECHANISM = "SCRAM-SHA-512"
    settings.FJORD_SASL_USERNAME = CONTROL_USER
    settings.FJORD_SASL_PASSWORD = CONTROL_PASSWORD
    settings.FJORD_PIPELINES_DIR = tmp_path
    kafka.reset()
    yield sasl_broker
    kafka.reset()


def held_acls(bootstrap: str, pipeline: Pipeline) -> set[tuple[str, str, str, str]]:
    async def described():
        async with AdminClient(bootstrap) as admin:
            return await admin.describe_acls(
                AclBindingFilter(principal=principal.principal(pipeline))
            )

    return {
        (b.resource_type.name, b.pattern_type.name, b.resource_name, b.operation.name)
        for b in asyncio.run(described())
    }


def scram_users(bootstrap: str) -> set[str]:
    async def described():
        async with AdminClient(bootstrap) as admin:
            return await admin.describe_user_scram_credentials()

    return set(asyncio.run(described()))


def as_pipeline(broker, pipeline: Pipeline, **extra) -> dict:
    return {
        "bootstrap.servers": broker.sasl_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": principal.user(pipeline),
        "sasl.password": pipeline.kafka_password,
        **extra,
    }


def refusal(action) -> str:
    with pytest.raises(KafkaException) as refused:
        action()
    return refused.value.args[0].name()


def produce_as(settings: dict, topic: str) -> None:
    producer = Producer({**settings, "message.timeout.ms": 10_000})
    failures = []
    producer.produce(topic, b"x", on_delivery=lambda err, msg: err and failures.append(err))
    producer.flush(30)
    if failures:
        raise KafkaException(failures[0])


def read_as(broker, pipeline: Pipeline, topic: str) -> bytes:
    """The partition's first record, read as the fjord source reads (assigned, no group), or
    the broker's refusal (KafkaAdminError)."""
    security = Security(
        "SASL_PLAINTEXT",
        None,
        "SCRAM-SHA-512",
        principal.user(pipeline),
        pipeline.kafka_password,
    )

    async def first() -> bytes:
        async with Consumer(
            broker.sasl_bootstrap, security=security, enable_auto_commit=False
        ) as consumer:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            while not (records := (await consumer.getmany(tp, timeout_ms=1000)).get(tp)):
                pass
            return records[0].value

    return asyncio.run(first())


def read_refusal(broker, pipeline: Pipeline, topic: str) -> str:
    with pytest.raises(KafkaAdminError) as refused:
        read_as(broker, pipeline, topic)
    return refused.value.name


def literal_source_acls(pipeline: Pipeline, source: str, sink: str) -> set[tuple]:
    prefix = pipeline.transactional_id_prefix
    return {
        ("TOPIC", "LITERAL", source, "READ"),
        ("TOPIC", "LITERAL", source, "DESCRIBE"),
        ("TOPIC", "LITERAL", sink, "WRITE"),
        ("TOPIC", "LITERAL", sink, "DESCRIBE"),
        *(
            ("TOPIC", "LITERAL", f"_fjord_sink_{prefix}", op)
            for op in ("CREATE", "READ", "WRITE", "DESCRIBE")
        ),
        *(
            ("TRANSACTIONAL_ID", "PREFIXED", f"{prefix}-", op)
            for op in ("WRITE", "DESCRIBE", "TWO_PHASE_COMMIT")
        ),
    }


@pytest.mark.django_db
def test_a_pipeline_gets_a_principal_with_exactly_its_acls(secured, operator_api, unique):
    source, sink, other = unique("src"), unique("sink"), unique("other")
    for topic in (source, sink, other):
        make_topic(secured.bootstrap, topic, 1)
        produce(secured.bootstrap, topic, [b"first"])
    created = operator_api.post(
        "/api/v1/pipelines/",
        definition(unique, source_topics=[source], sink_topic=sink),
        format="json",
    )
    assert created.status_code == 201, created.data
    assert "kafka_password" not in created.data
    pipeline = Pipeline.objects.get(pk=created.data["id"])
    prefix = pipeline.transactional_id_prefix
    assert principal.user(pipeline) in scram_users(secured.bootstrap)
    assert held_acls(secured.bootstrap, pipeline) == literal_source_acls(pipeline, source, sink)

    # Its credentials reach its topics, and nothing else.
    own = as_pipeline(secured, pipeline)
    assert read_as(secured, pipeline, source) == b"first"
    produce_as(own, sink)
    assert refusal(lambda: produce_as(own, other)) == "TOPIC_AUTHORIZATION_FAILED"
    assert read_refusal(secured, pipeline, other) == "TOPIC_AUTHORIZATION_FAILED"
    assert read_refusal(secured, pipeline, sink) == "TOPIC_AUTHORIZATION_FAILED"

    # A pattern source: READ on its literal prefix.
    changed = operator_api.patch(
        f"/api/v1/pipelines/{pipeline.pk}/",
        {"source_topics": [], "source_pattern": f"{source}-(eu|us)"},
        format="json",
    )
    assert changed.status_code == 200, changed.data
    readable = {(k, p, n) for k, p, n, op in held_acls(secured.bootstrap, pipeline) if op == "READ"}
    assert readable == {
        ("TOPIC", "PREFIXED", f"{source}-"),
        ("TOPIC", "LITERAL", f"_fjord_sink_{prefix}"),
    }

    assert operator_api.delete(f"/api/v1/pipelines/{pipeline.pk}/").status_code == 204
    assert held_acls(secured.bootstrap, pipeline) == set()
    assert principal.user(pipeline) not in scram_users(secured.bootstrap)


@pytest.mark.django_db
def test_a_start_brings_the_principal_in_step(secured, operator_api, unique):
    """A pipeline defined before pipelines had principals, or whose user and ACLs went, gets
    exactly its own again when it starts."""
    source, sink = unique("src"), unique("sink")
    created = operator_api.post(
        "/api/v1/pipelines/",
        definition(unique, source_topics=[source], sink_topic=sink),
        format="json",
    )
    assert created.status_code == 201, created.data
    pipeline = Pipeline.objects.get(pk=created.data["id"])
    principal.remove(pipeline)
    assert held_acls(secured.bootstrap, pipeline) == set()
    assert principal.user(pipeline) not in scram_users(secured.bootstrap)

    started = operator_api.post(f"/api/v1/pipelines/{pipeline.pk}/start/")
    assert started.status_code == 202, started.data
    assert principal.user(pipeline) in scram_users(secured.bootstrap)
    assert held_acls(secured.bootstrap, pipeline) == literal_source_acls(pipeline, source, sink)
    principal.remove(pipeline)


@pytest.mark.django_db
def test_the_console_shows_the_principal_and_its_acls(secured, operator, viewer_browser, unique):
    pipeline = Pipeline.objects.create(
        name=unique("shown"), source_topics=["in"], sink_topic="out", created_by=operator
    )
    principal.sync(pipeline)
    try:
        page = viewer_browser.get(f"/pipelines/{pipeline.pk}/").content.decode()
    finally:
        principal.remove(pipeline)
    assert f"Runs as <code>User:{principal.user(pipeline)}</code>" in page
    assert "TWO_PHASE_COMMIT" in page and "<code>out</code>" in page
    assert pipeline.kafka_password not in page


@pytest.mark.django_db
def test_on_a_broker_that_authenticates_nobody_pipelines_run_unauthenticated(
    broker_settings, operator_api, viewer_browser, unique
):
    created = operator_api.post("/api/v1/pipelines/", definition(unique), format="json")
    assert created.status_code == 201, created.data
    page = viewer_browser.get(f"/pipelines/{created.data['id']}/").content.decode()
    assert "Pipelines run unauthenticated" in page


def spark_processes(pid: int) -> list[int]:
    """The run process's descendants: Spark's JVM and its Python workers."""
    found, queue = [], [pid]
    while queue:
        parent = queue.pop()
        for task in Path(f"/proc/{parent}/task").iterdir():
            children = (task / "children").read_text().split()
            found += [int(c) for c in children]
            queue += [int(c) for c in children]
    return found


def environments(pids: list[int]) -> dict[str, str]:
    """{command line: environment} of those of the processes still there."""
    found = {}
    for pid in pids:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            found[command.decode()] = Path(f"/proc/{pid}/environ").read_bytes().decode()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a short-lived helper, gone meanwhile
    return found


@pytest.mark.django_db(transaction=True)
def test_a_pipeline_runs_exactly_once_as_its_principal_and_nothing_else(
    secured, operator_api, monkeypatch, tmp_path, unique
):
    """The run processes are spawned as the Celery task does (lifecycle.spawn), with the
    control plane's environment: its secrets must not reach Spark."""
    source, sink, other = unique("src"), unique("sink"), unique("other")
    make_topic(secured.bootstrap, other, 1)
    created = upper_case_copy(operator_api, unique, secured.bootstrap, source, sink, 20)
    pipeline = Pipeline.objects.get(pk=created["id"])
    for name, value in {
        "DJANGO_SETTINGS_MODULE": "control.settings_test",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{connection.settings_dict['NAME']}",
        "DJANGO_SECRET_KEY": SECRET_KEY,
        "FJORD_BOOTSTRAP": secured.sasl_bootstrap,
        "FJORD_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "FJORD_SASL_MECHANISM": "SCRAM-SHA-512",
        "FJORD_SASL_USERNAME": CONTROL_USER,
        "FJORD_SASL_PASSWORD": CONTROL_PASSWORD,
        "FJORD_PIPELINES_DIR": str(tmp_path),
        "FJORD_SPARK_MASTER": "local[2,2]",
    }.items():
        monkeypatch.setenv(name, value)
    reader = CommittedReader(secured.bootstrap, sink)
    try:
        run = PipelineRun.objects.create(pipeline=pipeline)
        lifecycle.spawn(run)
        copied = reader.until(20)
        assert copied == sorted(b"R%d" % i for i in range(20)), run_state(run.pk)
        run.refresh_from_db()
        spark = environments(spark_processes(run.pid))
        assert any("java" in command for command in spark), list(spark)
        for command, inherited in spark.items():
            for secret in (CONTROL_PASSWORD, SECRET_KEY, "DATABASE_URL", "FJORD_SASL_USERNAME"):
                assert secret not in inherited, command
        lifecycle.stop(pipeline)
        wait_run(run.pk, lambda r: r.status == "stopped", "stopped")

        # Changed behind the API's back (its ACLs left as they were): the broker refuses.
        Pipeline.objects.filter(pk=pipeline.pk).update(sink_topic=other)
        failed = PipelineRun.objects.create(pipeline=pipeline)
        lifecycle.spawn(failed)
        produce(secured.bootstrap, source, [b"s%d" % i for i in range(5)])
        error = wait_run(failed.pk, lambda r: r.status == "failed", "failed", 180).last_error
        assert "TOPIC_AUTHORIZATION_FAILED" in error, error
        assert CONTROL_PASSWORD not in error and pipeline.kafka_password not in error
        assert committed_to_end(secured.bootstrap, sink) == copied  # nothing reached it meanwhile
    finally:
        reader.close()
        for active in PipelineRun.objects.filter(status__in=PipelineRun.ACTIVE, pid__isnull=False):
            os.kill(active.pid, signal.SIGKILL)
        try:
            principal.remove(pipeline)
        except KafkaAdminError:
            pass
