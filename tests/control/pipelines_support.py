"""What the pipeline tests share: a pipeline's definition for the REST API, records produced to
its source, an upper-case copy of a topic defined through the API, reading what it committed,
and waiting for a run's state (polling the database the run writes to)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka import Producer as ConfluentProducer
from jobs_support import make_topic

from pipelines import lifecycle
from pipelines.models import PipelineRun


def definition(unique, **fields) -> dict:
    return {
        "name": unique("pipe"),
        "source_topics": ["in"],
        "sink_topic": "out",
        "transformation": "SELECT key, value FROM source",
        **fields,
    }


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = ConfluentProducer({"bootstrap.servers": bootstrap})
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(30) == 0


def upper_case_copy(
    operator_api, unique, bootstrap: str, source: str, sink: str, records: int, partitions: int = 1
) -> dict:
    """Topics `source` (over `partitions` partitions, holding r0, r1, ... up to `records`) and
    `sink` (one partition), and a pipeline copying the one to the other in upper case from the
    earliest offsets, defined through the REST API: the pipeline as the API answered."""
    make_topic(bootstrap, source, partitions)
    make_topic(bootstrap, sink, 1)
    produce(bootstrap, source, [b"r%d" % i for i in range(records)])
    created = operator_api.post(
        "/api/v1/pipelines/",
        definition(
            unique,
            source_topics=[source],
            sink_topic=sink,
            starting_offsets="earliest",
            transformation="SELECT key, upper(cast(value AS string)) AS value FROM source",
            trigger_interval_ms=200,
        ),
        format="json",
    )
    assert created.status_code == 201, created.data
    return created.data


class CommittedReader:
    """A read_committed confluent-kafka consumer of the sink topic, gathering what it reads."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = ConfluentConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{topic}-reader",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
            }
        )
        self.consumer.subscribe([topic])
        self.values: list[bytes] = []

    def until(self, count: int, timeout: float = 120) -> list[bytes]:
        deadline = time.monotonic() + timeout
        while len(self.values) < count and time.monotonic() < deadline:
            for message in self.consumer.consume(500, 0.5):
                if not message.error():
                    self.values.append(message.value())
        return sorted(self.values)

    def close(self) -> None:
        self.consumer.close()


def committed_to_end(bootstrap: str, topic: str) -> list[bytes]:
    """What the topic holds for a read_committed reader now: a fresh consumer reads each
    partition once from its start to the end the broker gives at this moment (for
    read_committed, the last stable offset), so what comes later is not waited for."""
    consumer = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-to-end",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = list(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 30)[1] for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while unread := [
            tp.partition
            for tp in consumer.position([TopicPartition(topic, p) for p in partitions])
            if ends[tp.partition] > 0 and tp.offset < ends[tp.partition]
        ]:
            assert time.monotonic() < deadline, f"{topic}: partitions {unread} not read to {ends}"
            for message in consumer.consume(500, 0.5):
                if message.error():
                    raise KafkaException(message.error())
                values.append(message.value())
        return sorted(values)
    finally:
        consumer.close()


def run_state(pk: int) -> str:
    run = PipelineRun.objects.get(pk=pk)
    return f"run {pk} is {run.status}: {run.last_error}\n{lifecycle.log_tail(run)}"


def wait_run(pk: int, predicate, what: str, timeout: float = 120) -> PipelineRun:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = PipelineRun.objects.get(pk=pk)
        if predicate(run):
            return run
        time.sleep(0.2)
    raise AssertionError(f"waiting for {what}: {run_state(pk)}")
