"""kcat (librdkafka 2.0 inside a C tool) against a real broker process: produce with keys,
headers and every codec, consume back, list metadata, start at an offset found by timestamp."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from compat_support import topic_name
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

KCAT = shutil.which("kcat") or shutil.which("kafkacat")

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(KCAT is None, reason="kcat is not installed"),
]


def kcat(bootstrap: str, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
    proc = subprocess.run(
        [KCAT, "-b", bootstrap, "-q", "-X", "enable.idempotence=false", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"kcat {args} exited {proc.returncode}: {proc.stderr}"
    return proc.stdout


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30)
    futures[name].result(timeout=30)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume_with_keys(broker_process, codec):
    bootstrap = broker_process.bootstrap
    topic = topic_name(f"kcat-{codec}")
    create_topic(bootstrap, topic, 1)
    lines = [f"key-{i}:value {i} " + "x" * (i % 50) for i in range(500)]
    kcat(
        bootstrap,
        "-P",
        "-t",
        topic,
        "-p",
        "0",
        "-K:",
        "-z",
        codec,
        "-X",
        "linger.ms=50",
        "-H",
        "origin=kcat",
        stdin="\n".join(lines) + "\n",
    )
    out = kcat(bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%o|%k:%s|%h\n")
    rows = out.splitlines()
    assert [r.split("|")[0] for r in rows] == [str(i) for i in range(500)]
    assert [r.split("|")[1] for r in rows] == lines
    assert {r.split("|")[2] for r in rows} == {"origin=kcat"}


def test_keyed_produce_across_partitions(broker_process):
    """librdkafka's partitioner spreads keys; each partition keeps the input order."""
    bootstrap = broker_process.bootstrap
    topic = topic_name("kcat-parts")
    create_topic(bootstrap, topic, 3)
    lines = [f"k{i % 17}:{i}" for i in range(300)]
    kcat(bootstrap, "-P", "-t", topic, "-K:", "-z", "lz4", stdin="\n".join(lines) + "\n")
    out = kcat(bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%p|%o|%k|%s\n")
    per_partition: dict[str, list[tuple[int, str, str]]] = {}
    for row in out.splitlines():
        p, o, k, v = row.split("|")
        per_partition.setdefault(p, []).append((int(o), k, v))
    assert sum(map(len, per_partition.values())) == 300
    key_partition = {}
    for p, rows in per_partition.items():
        assert [o for o, _, _ in rows] == list(range(len(rows)))
        values = [int(v) for _, _, v in rows]
        assert values == sorted(values)
        for _, k, _ in rows:
            assert key_partition.setdefault(k, p) == p, f"key {k} in two partitions"
    assert len(per_partition) > 1


def test_list_metadata(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("kcat-list")
    create_topic(bootstrap, topic, 3)
    meta = json.loads(kcat(bootstrap, "-L", "-J"))
    [broker] = meta["brokers"]
    assert broker["name"] == f"127.0.0.1:{broker_process.port}"
    [t] = [t for t in meta["topics"] if t["topic"] == topic]
    assert [p["partition"] for p in t["partitions"]] == [0, 1, 2]
    for p in t["partitions"]:
        assert p["leader"] == broker["id"]
        assert [r["id"] for r in p["replicas"]] == [broker["id"]]
        assert [r["id"] for r in p["isrs"]] == [broker["id"]]
    plain = kcat(bootstrap, "-L", "-t", topic)
    assert f'topic "{topic}" with 3 partitions:' in plain


def test_producer_auto_creates_topic(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("kcat-auto")
    kcat(bootstrap, "-P", "-t", topic, "-K:", stdin="a:1\nb:2\n")
    out = kcat(bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%k=%s\n")
    assert sorted(out.splitlines()) == ["a=1", "b=2"]


def test_consume_from_timestamp(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("kcat-ts")
    create_topic(bootstrap, topic, 1)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "compression.type": "gzip",
            "linger.ms": 20,
        }
    )
    base = 1_700_000_000_000
    for i in range(40):
        producer.produce(topic, value=b"v%d" % i, partition=0, timestamp=base + 1000 * i)
    assert producer.flush(30) == 0
    producer.close()

    out = kcat(bootstrap, "-C", "-t", topic, "-o", f"s@{base + 25_500}", "-e", "-f", "%o %T %s\n")
    assert out.splitlines() == [f"{i} {base + 1000 * i} v{i}" for i in range(26, 40)]

    # Stop at a timestamp too: [s@, e@).
    out = kcat(
        bootstrap,
        "-C",
        "-t",
        topic,
        "-o",
        f"s@{base + 3000}",
        "-o",
        f"e@{base + 6000}",
        "-f",
        "%o\n",
    )
    assert out.splitlines() == ["3", "4", "5"]

    # Relative to the end: the last three.
    out = kcat(bootstrap, "-C", "-t", topic, "-o", "-3", "-e", "-f", "%o\n")
    assert out.splitlines() == ["37", "38", "39"]

    # Query mode: offset for a timestamp.
    out = kcat(bootstrap, "-Q", "-t", f"{topic}:0:{base + 10_000}")
    assert f"{topic} [0] offset 10" in out
