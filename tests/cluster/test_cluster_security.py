"""A cluster whose only listener is SASL_SSL with an authorizer: the brokers reach each other
on it with their own credentials (inter.broker.listener.name, sasl.mechanism.inter.broker.
protocol), as a super user, and replicate: acks=all with min.insync.replicas=2 is written."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tls_certificates import CertificateAuthority

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def test_brokers_replicate_over_sasl_ssl_as_their_own_user(make_formed_cluster, tmp_path):
    ca = CertificateAuthority()
    broker = ca.issue("CN=broker", server=True)
    ca_file = tmp_path / "ca.pem"
    ca_file.write_text(ca.pem)
    jaas = (
        f'{PLAIN_MODULE} required username="broker" password="broker-secret" '
        'user_broker="broker-secret" user_alice="alice-secret";'
    )
    # The harness names its listener PLAINTEXT; here that name carries SASL_SSL.
    cluster = make_formed_cluster(
        2,
        (
            "listener.security.protocol.map=PLAINTEXT:SASL_SSL",
            "inter.broker.listener.name=PLAINTEXT",
            "sasl.enabled.mechanisms=PLAIN",
            "sasl.mechanism.inter.broker.protocol=PLAIN",
            f"listener.name.plaintext.plain.sasl.jaas.config={jaas}",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.certificate.chain={broker.certificate}",
            f"ssl.keystore.key={broker.key}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={ca_file}",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:broker;User:alice",
            "min.insync.replicas=2",
            "offsets.topic.replication.factor=2",
            "offsets.topic.num.partitions=4",
        ),
        network="loopback",
    )
    client = {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
        "ssl.ca.location": str(ca_file),
    }
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(client)
    admin.create_topics([NewTopic(topic, 1, 2)], operation_timeout=30)[topic].result(timeout=60)

    acknowledged = []
    producer = Producer({**client, "acks": "all", "enable.idempotence": True})
    for i in range(20):
        producer.produce(
            topic, b"%d" % i, on_delivery=lambda err, msg: acknowledged.append((err, msg.offset()))
        )
    assert producer.flush(60) == 0
    assert [err for err, _ in acknowledged] == [None] * 20
    assert sorted(offset for _, offset in acknowledged) == list(range(20))

    consumer = Consumer({**client, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values = []
    try:
        while len(values) < 20:
            message = consumer.poll(30)
            assert message is not None, f"only {len(values)} of 20 records came back"
            assert message.error() is None, message.error()
            values.append(message.value())
    finally:
        consumer.close()
    assert values == [b"%d" % i for i in range(20)]
