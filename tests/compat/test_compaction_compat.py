"""Log compaction (cleanup.policy=compact) with a real client against a broker process.

confluent-kafka writes keyed updates and tombstones, or transactions that commit and abort,
to a compacted topic with small segments; its consumer, reading from the beginning while the
broker's cleaner runs in the background, must always see a valid log (CRCs intact, offsets
strictly increasing across the holes compaction leaves) and, once the cleaner has caught up,
only the latest value of every key, tombstoned keys gone, and for read_committed exactly the
committed data.
"""

from __future__ import annotations

import itertools
import uuid

import pytest
from broker_process import BrokerProcess
from compat_support import topic_name, wait_until
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

pytestmark = pytest.mark.timeout(240)

# Segments roll every few records, every dirty segment makes the log cleanable, and
# tombstones and emptied markers go on the cleaner's second pass over them.
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "2048",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0",
}
FILLER = b"f" * 700  # a few of these roll a segment
KEYS = [b"k%d" % i for i in range(10)]


@pytest.fixture(scope="module")
def cleaner_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("compact-logs"), "log.cleaner.backoff.ms=50")
    broker.start()
    yield broker
    assert broker.stop() == 0, "".join(broker.output[-50:])


def create_compacted_topic(bootstrap: str, prefix: str) -> str:
    name = topic_name(prefix)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, 1, 1, config=COMPACTED)], operation_timeout=30)
    futures[name].result(timeout=30)
    return name


def end_offset(bootstrap: str, topic: str, isolation: str) -> int:
    """ListOffsets(latest): the high watermark, or the LSO for read_committed."""
    level = (
        IsolationLevel.READ_COMMITTED
        if isolation == "read_committed"
        else IsolationLevel.READ_UNCOMMITTED
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets(
        {TopicPartition(topic, 0): OffsetSpec.latest()}, isolation_level=level, request_timeout=30
    )
    return next(iter(futures.values())).result().offset


def read_all(bootstrap: str, topic: str, isolation: str = "read_uncommitted"):
    """(offset, key, value) of every record a consumer reads from the beginning to the end
    offset, checking the log stays offset-ordered."""
    end = end_offset(bootstrap, topic, isolation)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"compaction-compat-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "check.crcs": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[tuple[int, bytes | None, bytes | None]] = []
    reached = 0

    def caught_up() -> bool:
        nonlocal reached
        for msg in consumer.consume(1000, 0.2):
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                reached = max(reached, msg.offset())
                continue
            out.append((msg.offset(), msg.key(), msg.value()))
            reached = max(reached, msg.offset() + 1)
        return reached >= end

    try:
        wait_until(caught_up, 60, f"reading {topic} to offset {end}")
    finally:
        consumer.close()
    offsets = [o for o, _, _ in out]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    return out


def keyed(records) -> dict[bytes, list[bytes | None]]:
    """Values of the test keys in log order (fillers left out)."""
    out: dict[bytes, list[bytes | None]] = {}
    for _, key, value in records:
        if key in KEYS:
            out.setdefault(key, []).append(value)
    return out


def test_updates_and_tombstones_compact_to_the_latest_value_per_key(cleaner_broker):
    bootstrap = cleaner_broker.bootstrap
    topic = create_compacted_topic(bootstrap, "compact-keys")
    errors = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2}
    )

    def send(key: bytes, value: bytes | None) -> None:
        producer.produce(topic, value, key, on_delivery=lambda e, _m: e and errors.append(e))

    for round_ in range(20):
        for key in KEYS:
            send(key, b"%s-v%d" % (key, round_))
    for key in KEYS[:3]:
        send(key, None)
    assert producer.flush(30) == 0
    expected = {key: [b"%s-v19" % key] for key in KEYS[3:]}
    fillers = itertools.count()
    filler_keys: list[bytes] = []

    def compacted():
        # Fresh records make dirt for the cleaner's next pass and push the tombstones out of
        # the active segment; the first pass stamps their delete horizon, the next drops them.
        filler_keys.append(b"filler-%d" % next(fillers))
        send(filler_keys[-1], FILLER)
        assert producer.flush(30) == 0
        records = read_all(bootstrap, topic)
        return records if keyed(records) == expected else None

    records = wait_until(compacted, 90, "the cleaner to keep only the latest value per key")
    assert errors == []
    assert records[0][0] > 0  # superseded records at the start left a hole
    assert [k for _, k, _ in records if k not in KEYS] == filler_keys  # unique keys all stay
    producer.close()


def test_read_committed_gets_exactly_the_committed_data_of_a_compacted_topic(cleaner_broker):
    bootstrap = cleaner_broker.bootstrap
    topic = create_compacted_topic(bootstrap, "compact-txn")
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"compact-{uuid.uuid4().hex[:8]}",
            "linger.ms": 2,
        }
    )
    producer.init_transactions(30)

    def transaction(values: dict[bytes, bytes], commit: bool = True) -> None:
        producer.begin_transaction()
        for key, value in values.items():
            producer.produce(topic, value, key)
        assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    transaction(dict.fromkeys(KEYS[:5], b"first"))
    transaction(dict.fromkeys(KEYS[:5], b"aborted"), commit=False)
    transaction({**dict.fromkeys(KEYS[5:], b"third"), KEYS[0]: b"third"})
    transaction(dict.fromkeys(KEYS[5:8], b"aborted"), commit=False)
    expected = {
        **{key: [b"first"] for key in KEYS[1:5]},
        **{key: [b"third"] for key in [KEYS[0], *KEYS[5:]]},
    }
    # Whatever the cleaner has done so far, read_committed never sees aborted data.
    committed_so_far = keyed(read_all(bootstrap, topic, "read_committed"))
    assert {k: v[-1:] for k, v in committed_so_far.items()} == expected
    fillers = itertools.count()

    def cleaned():
        transaction({b"filler-%d" % next(fillers): FILLER})
        everything = keyed(read_all(bootstrap, topic))  # read_uncommitted: aborted data too
        return everything == expected

    wait_until(cleaned, 90, "the cleaner to drop the aborted and superseded records")
    committed = read_all(bootstrap, topic, "read_committed")
    assert keyed(committed) == expected
    filler_keys = [k for _, k, _ in committed if k not in KEYS]
    assert filler_keys == [b"filler-%d" % i for i in range(len(filler_keys))]
    assert len(filler_keys) == next(fillers)
    producer.close()


def test_compaction_configs_as_kafka_validates_and_describes_them(cleaner_broker):
    admin = AdminClient({"bootstrap.servers": cleaner_broker.bootstrap})
    topic = topic_name("compact-configs")
    configs = {"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.25"}
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(timeout=30)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(timeout=30)
    assert described["cleanup.policy"].value == "compact,delete"
    assert described["min.cleanable.dirty.ratio"].value == "0.25"
    assert described["delete.retention.ms"].value == "86400000"
    assert described["delete.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert described["max.compaction.lag.ms"].value == str(2**63 - 1)
    for bad in (
        {"cleanup.policy": "compact,shred"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
    ):
        name = topic_name("compact-bad")
        future = admin.create_topics([NewTopic(name, 1, 1, config=bad)])[name]
        with pytest.raises(KafkaException) as refused:
            future.result(timeout=30)
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    # The internal topics are compacted, with Kafka's settings.
    producer = Producer({"bootstrap.servers": cleaner_broker.bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    producer.close()
    consumer = Consumer(
        {
            "bootstrap.servers": cleaner_broker.bootstrap,
            "group.id": topic,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()
    for internal in ("__consumer_offsets", "__transaction_state"):
        resource = ConfigResource(ResourceType.TOPIC, internal)
        described = admin.describe_configs([resource])[resource].result(timeout=30)
        assert described["cleanup.policy"].value == "compact"
        assert described["segment.bytes"].value == "104857600"
