"""`python -m control.launch --brokers 3` when a broker is killed (kill -9) under a producer
writing with acks=all: the launcher restarts it while the other brokers take over, no
acknowledged record is lost, and the restarted broker catches up into the ISR."""

from __future__ import annotations

import os
import signal
import uuid

from child_processes import child_pid
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from polling import wait_for

BATCHES, BATCH = 30, 100
# The batch after which the partition's leader is killed: the rest is written over the failover.
KILL_AFTER = 5


def isr(admin: AdminClient, topic: str) -> list[int]:
    return sorted(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs)


def test_a_killed_broker_is_restarted_and_rejoins_the_isr_without_losing_a_write(
    cluster_platform,
):
    platform = cluster_platform
    topic = f"restarted-leader-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": platform.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(
        30
    )
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader

    acknowledged: list[bytes] = []
    failed: list[str] = []

    def delivered(err, msg) -> None:
        if err is None:
            acknowledged.append(msg.value())
        else:
            failed.append(str(err))

    # Idempotence keeps what the producer retries over the failover from being written twice.
    producer = Producer(
        {"bootstrap.servers": platform.bootstrap, "acks": "all", "enable.idempotence": True}
    )
    for batch in range(BATCHES):
        if batch == KILL_AFTER:
            os.kill(child_pid(platform.proc.pid, f"node.id={leader}"), signal.SIGKILL)
        for n in range(BATCH):
            producer.produce(topic, f"{batch}-{n}".encode(), on_delivery=delivered)
        assert producer.flush(120) == 0, f"records still unacknowledged after batch {batch}"

    assert not failed, failed[:5]
    assert len(acknowledged) == BATCHES * BATCH
    killed = f"broker-{leader}"
    output = "".join(platform.output)
    assert f"fjord: {killed} exited with status -9; restarting in 1 s" in output, output[-3000:]
    wait_for(
        lambda: sum(line.startswith(f"fjord: {killed} listening") for line in platform.output) == 2,
        120,
        f"{killed} listening again",
    )
    wait_for(lambda: isr(admin, topic) == [1, 2, 3], 120, f"{killed} back in the ISR")

    consumer = Consumer(
        {
            "bootstrap.servers": platform.bootstrap,
            "group.id": f"reader-{topic}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    read: set[bytes] = set()
    wait_for(
        lambda: (
            read.update(m.value() for m in consumer.consume(500, 1) if not m.error())
            or read >= set(acknowledged)
        ),
        60,
        "every acknowledged record read",
        lambda: len(set(acknowledged) - read),
    )
    consumer.close()
    # The console served throughout.
    assert "fjord: web exited" not in "".join(platform.output)
