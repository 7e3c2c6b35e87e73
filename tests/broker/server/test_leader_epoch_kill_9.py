"""The leader epoch cache survives kill -9: a broker process killed with SIGKILL after writes
and a DeleteRecords restarts with the epochs its log holds, whatever checkpoint it left."""

from __future__ import annotations

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT

TOPIC = "epochs"


def test_leader_epochs_survive_kill_9(make_broker_process):
    broker = make_broker_process().start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)], operation_timeout=30)[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(5):
        producer.produce(TOPIC, b"v%d" % i, partition=0)
        producer.flush(30)  # one batch per record
    [(_, deleted)] = admin.delete_records([TopicPartition(TOPIC, 0, 2)]).items()
    assert deleted.result(timeout=30).low_watermark == 2
    del admin, producer
    broker.kill()
    broker.start()
    assert broker.stop() == 0, "".join(broker.output)
    # Epoch 0 from the new log start: not from 0 (the start was lost), not from the log end
    # (the epochs were lost and the restarted leader assigned its epoch afresh).
    checkpoint = broker.log_dir / f"{TOPIC}-0" / LEADER_EPOCH_CHECKPOINT
    assert checkpoint.read_text() == "0\n1\n0 2\n"
