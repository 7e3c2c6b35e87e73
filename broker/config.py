"""Kafka property names, types, defaults and validation for the broker and for topics.

One table (`BROKER_CONFIGS`, `TOPIC_CONFIGS`) drives parsing of server.properties, `--override`,
CreateTopics/AlterConfigs validation and DescribeConfigs output, so a property is defined once.
Only properties Fjord honours are defined: anything else is rejected rather than silently ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from broker.storage.config import magic_of_version

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigError(ValueError):
    """An unknown property or an invalid value; the message names both."""


# DescribeConfigs config_type values (KIP-569).
TYPE_IDS = {
    "boolean": 1,
    "string": 2,
    "int": 3,
    "short": 4,
    "long": 5,
    "double": 6,
    "list": 7,
    "class": 8,
    "password": 9,
}


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: str  # one of TYPE_IDS
    default: object
    doc: str
    validator: Callable[[object], str | None] | None = None
    dynamic: bool = False  # may change at run time through AlterConfigs / IncrementalAlterConfigs

    def parse(self, raw: object) -> object:
        value = _coerce(self, raw)
        if value is not None and self.validator is not None:
            problem = self.validator(value)
            if problem:
                shown = "[hidden]" if self.type == "password" else raw  # as Kafka hides them
                raise ConfigError(f"Invalid value {shown} for configuration {self.name}: {problem}")
        return value

    @property
    def type_id(self) -> int:
        return TYPE_IDS[self.type]


def _coerce(d: ConfigDef, raw: object) -> object:
    if raw is None:
        return None
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    try:
        if d.type in ("int", "long", "short"):
            value = int(text)
            limit = INT_MAX if d.type == "int" else LONG_MAX
            if not -limit - 1 <= value <= limit:
                raise ValueError
            return value
        if d.type == "double":
            return float(text)
        if d.type == "boolean":
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        if d.type == "list":
            return [item.strip() for item in text.split(",") if item.strip()]
    except ValueError:
        raise ConfigError(
            f"Invalid value {raw} for configuration {d.name}: not a valid {d.type}"
        ) from None
    return text


def at_least(minimum: int) -> Callable[[object], str | None]:
    return lambda v: None if v >= minimum else f"Value must be at least {minimum}"  # type: ignore[operator]


def between(low: float, high: float) -> Callable[[object], str | None]:
    return lambda v: None if low <= v <= high else f"Value must be between {low} and {high}"  # type: ignore[operator]


def _valid_store_url(value: object) -> str | None:
    if not value:
        return None
    if not str(value).startswith(("postgresql://", "postgres://")):
        return "must be empty (embedded SQLite) or a postgresql:// URL"
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from broker.redaction import redact

    try:
        conninfo_to_dict(str(value))
    except psycopg.Error as e:
        return redact(str(e))  # libpq quotes the whole URL, password included
    return None


def one_of(*allowed: str) -> Callable[[object], str | None]:
    def check(v: object) -> str | None:
        values = v if isinstance(v, list) else [v]
        bad = [x for x in values if x not in allowed]
        return f"String must be one of: {', '.join(allowed)}" if bad or not values else None

    return check


def kafka_version(v: object) -> str | None:
    try:
        magic_of_version(str(v))
    except ValueError as e:
        return str(e)
    return None


def _valid_connection_overrides(value: object) -> str | None:
    from broker.server.connection_quotas import parse_overrides

    try:
        parse_overrides(connection_overrides(value))
    except ValueError as e:
        return str(e)
    return None


def connection_overrides(value: object) -> list[str]:
    """max.connections.per.ip.overrides' items (a string type: Kafka allows it empty)."""
    return [item.strip() for item in str(value or "").split(",") if item.strip()]


# The authorizer class names Kafka 4 and its predecessors accept; both select Fjord's.
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"

LISTENER_RE = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:]*):(?P<port>\d+)$")


def _valid_listeners(value: object) -> str | None:
    for item in value:  # type: ignore[attr-defined]
        m = LISTENER_RE.match(item)
        if not m or not 0 <= int(m["port"]) <= 65535:
            return f"{item!r} is not NAME://host:port"
    names = [LISTENER_RE.match(i)["name"] for i in value]  # type: ignore[attr-defined,index]
    if len(set(names)) != len(names):
        return "each listener must have a different name"
    return None


# Topic-level configs that Fjord honours, and the broker property that supplies each default
# (Kafka's "synonym"). The broker default applies until the topic overrides it.
_TOPIC = [
    (
        "cleanup.policy",
        "log.cleanup.policy",
        "list",
        ["delete"],
        one_of("delete", "compact"),
        "'delete' drops old segments by retention.ms and retention.bytes; 'compact' keeps the "
        "latest record of every key (the log cleaner); both may be given.",
    ),
    (
        "delete.retention.ms",
        "log.cleaner.delete.retention.ms",
        "long",
        86400000,
        at_least(0),
        "How long a compacted topic keeps a tombstone (and an emptied transaction's marker) "
        "after the cleaner first saw it.",
    ),
    (
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
        "double",
        0.5,
        between(0, 1),
        "The share of a compacted log that must be dirty (not yet cleaned) before the cleaner "
        "cleans it, unless max.compaction.lag.ms forces it.",
    ),
    (
        "min.compaction.lag.ms",
        "log.cleaner.min.compaction.lag.ms",
        "long",
        0,
        at_least(0),
        "The minimum time a record stays uncompacted.",
    ),
    (
        "max.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "long",
        LONG_MAX,
        at_least(1),
        "The maximum time a record stays ineligible for compaction; a compacted log also "
        "rolls its active segment by it.",
    ),
    (
        "compression.type",
        "compression.type",
        "string",
        "producer",
        one_of("producer"),
        "'producer': batches are stored as the producer compressed them; the broker never "
        "recompresses.",
    ),
    (
        "max.message.bytes",
        "message.max.bytes",
        "int",
        1048588,
        at_least(0),
        "The largest record batch size allowed.",
    ),
    (
        "message.timestamp.type",
        "log.message.timestamp.type",
        "string",
        "CreateTime",
        one_of("CreateTime", "LogAppendTime"),
        "Whether the timestamp in the message is message create time or log append time.",
    ),
    (
        "message.timestamp.before.max.ms",
        "log.message.timestamp.before.max.ms",
        "long",
        LONG_MAX,
        at_least(0),
        "How far a CreateTime timestamp may lie before the broker's time.",
    ),
    (
        "message.timestamp.after.max.ms",
        "log.message.timestamp.after.max.ms",
        "long",
        3600000,
        at_least(0),
        "How far a CreateTime timestamp may lie after the broker's time.",
    ),
    (
        "message.timestamp.difference.max.ms",
        "log.message.timestamp.difference.max.ms",
        "long",
        LONG_MAX,
        at_least(0),
        "Kafka before 4.0: how far a CreateTime timestamp may lie from the broker's time either "
        "way. Applies together with message.timestamp.before/after.max.ms; the tightest wins.",
    ),
    (
        "message.format.version",
        "log.message.format.version",
        "string",
        "3.0-IV1",
        kafka_version,
        "The record format the log writes, as the Kafka release that introduced it (seed 004): "
        "before 0.10.0 magic 0, before 0.11.0 magic 1 (no headers, transactions or idempotence; "
        "v2 batches are converted on append, v4+ fetches get the entries as stored), else v2.",
    ),
    (
        "retention.ms",
        "log.retention.ms",
        "long",
        604800000,
        at_least(-1),
        "Time to keep a segment after its newest record's timestamp; -1 keeps it forever.",
    ),
    (
        "retention.bytes",
        "log.retention.bytes",
        "long",
        -1,
        at_least(-1),
        "Size a partition may grow to before old segments are deleted; -1 means no limit.",
    ),
    (
        "segment.bytes",
        "log.segment.bytes",
        "int",
        1073741824,
        at_least(14),
        "The segment file size of the log.",
    ),
    (
        "segment.ms",
        "log.roll.ms",
        "long",
        604800000,
        at_least(1),
        "Time after which a segment is rolled even if not full.",
    ),
    (
        "segment.index.bytes",
        "log.index.size.max.bytes",
        "int",
        10485760,
        at_least(4),
        "The maximum size of an offset index; a full index rolls the segment.",
    ),
    (
        "index.interval.bytes",
        "log.index.interval.bytes",
        "int",
        4096,
        at_least(0),
        "How many bytes of log come between two offset index entries.",
    ),
    (
        "flush.messages",
        "log.flush.interval.messages",
        "long",
        LONG_MAX,
        at_least(1),
        "Number of messages written to a partition before its log is fsynced.",
    ),
    (
        "flush.ms",
        "log.flush.interval.ms",
        "long",
        LONG_MAX,
        at_least(0),
        "Time a record may stay in the OS page cache before its log is fsynced.",
    ),
    (
        "file.delete.delay.ms",
        "log.segment.delete.delay.ms",
        "long",
        60000,
        at_least(0),
        "Time to wait before deleting a file from the filesystem.",
    ),
    (
        "min.insync.replicas",
        "min.insync.replicas",
        "int",
        1,
        at_least(1),
        "Replicas that must acknowledge a write with acks=all.",
    ),
    (
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
        "boolean",
        False,
        None,
        "In a cluster, elect a replica out of the ISR when no in-sync one is left alive, "
        "accepting the loss of what only the others had.",
    ),
]

TOPIC_CONFIGS: dict[str, ConfigDef] = {
    name: ConfigDef(name, type_, default, doc, validator, dynamic=True)
    for name, _, type_, default, validator, doc in _TOPIC
}
TOPIC_TO_BROKER: dict[str, str] = {name: synonym for name, synonym, *_ in _TOPIC}

_MIN, _MAX = "min", "max"
# The group coordinator's properties (classic and KIP-848 consumer groups), Kafka's defaults.
GROUP_COORDINATOR_CONFIGS = [
    ConfigDef(
        "group.min.session.timeout.ms",
        "int",
        6000,
        "The minimum session timeout a classic member may ask for.",
        at_least(0),
    ),
    ConfigDef(
        "group.max.session.timeout.ms",
        "int",
        1800000,
        "The maximum session timeout a classic member may ask for.",
        at_least(0),
    ),
    ConfigDef(
        "group.initial.rebalance.delay.ms",
        "int",
        3000,
        "How long a new classic group waits for more members before its first rebalance.",
        at_least(0),
    ),
    ConfigDef(
        "group.max.size",
        "int",
        INT_MAX,
        "The maximum number of members of a classic group.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.session.timeout.ms",
        "int",
        45000,
        "The session timeout of consumer-protocol members.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.min.session.timeout.ms",
        "int",
        45000,
        "The minimum session timeout a consumer group may be configured with.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.max.session.timeout.ms",
        "int",
        60000,
        "The maximum session timeout a consumer group may be configured with.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.heartbeat.interval.ms",
        "int",
        5000,
        "The heartbeat interval given to consumer-protocol members.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.min.heartbeat.interval.ms",
        "int",
        5000,
        "The minimum heartbeat interval a consumer group may be configured with.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.max.heartbeat.interval.ms",
        "int",
        15000,
        "The maximum heartbeat interval a consumer group may be configured with.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.max.size",
        "int",
        INT_MAX,
        "The maximum number of members of a consumer group.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.assignors",
        "list",
        ["uniform", "range"],
        "Server-side assignors, by name; the first is the default.",
        one_of("uniform", "range"),
    ),
    ConfigDef(
        "group.coordinator.rebalance.protocols",
        "list",
        ["classic", "consumer"],
        "The group protocols the coordinator serves; 'classic' cannot be disabled.",
        lambda v: (
            one_of("classic", "consumer")(v)
            or (None if "classic" in v else "Disabling the 'classic' protocol is not supported.")
        ),
    ),
    ConfigDef(
        "group.consumer.migration.policy",
        "string",
        "bidirectional",
        "Which online conversions between classic and consumer groups are allowed.",
        one_of("bidirectional", "upgrade", "downgrade", "disabled"),
    ),
    ConfigDef(
        "offsets.topic.num.partitions",
        "int",
        50,
        "The number of partitions of __consumer_offsets (fixed once created).",
        at_least(1),
    ),
    ConfigDef(
        "offsets.topic.segment.bytes",
        "int",
        104857600,
        "The segment size of __consumer_offsets.",
        at_least(1),
    ),
    ConfigDef(
        "offsets.topic.replication.factor",
        "short",
        3,
        "The replication factor of __consumer_offsets: in a cluster it is created once that "
        "many brokers are usable (a cluster of one broker makes it 1). A single broker keeps "
        "one replica.",
        at_least(1),
    ),
    ConfigDef(
        "offsets.commit.timeout.ms",
        "int",
        5000,
        "In a cluster, how long a group coordinator's write may wait for the in-sync "
        "replicas before the request answers COORDINATOR_NOT_AVAILABLE.",
        at_least(1),
    ),
    ConfigDef(
        "offsets.retention.minutes",
        "int",
        10080,
        "How long committed offsets of an empty group are kept.",
        at_least(1),
    ),
    ConfigDef(
        "offsets.retention.check.interval.ms",
        "long",
        600000,
        "How often expired offsets are removed.",
        at_least(1),
    ),
    ConfigDef(
        "offset.metadata.max.bytes",
        "int",
        4096,
        "The largest metadata string an offset commit may carry.",
        at_least(0),
    ),
]


def _valid_protocol_map(value: object) -> str | None:
    try:
        parse_protocol_map(value)
    except ConfigError as e:
        return str(e)
    return None


def parse_protocol_map(value: object) -> dict[str, str]:
    """listener.security.protocol.map's LISTENER_NAME:SECURITY_PROTOCOL items."""
    mapping = {}
    for item in str(value).split(","):
        name, sep, protocol = item.strip().partition(":")
        if not sep or not name or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{item.strip()!r} is not LISTENER_NAME:PROTOCOL with a protocol among "
                f"{', '.join(SECURITY_PROTOCOLS)}"
            )
        if name in mapping:
            raise ConfigError(f"Listener {name} is mapped twice")
        mapping[name] = protocol
    return mapping


def _valid_jaas_config(value: object) -> str | None:
    from broker.security.jaas import JaasConfigError, parse_jaas_config

    try:
        parse_jaas_config(str(value))
    except JaasConfigError as e:
        return str(e)
    return None


def _valid_mapping_rules(value: object) -> str | None:
    from broker.security.tls import SslConfigError, SslPrincipalMapper

    try:
        SslPrincipalMapper(str(value))
    except SslConfigError as e:
        return str(e)
    return None


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CLIENT_AUTH_VALUES = ("none", "requested", "required")

# Authentication (issue 6). The ssl.* and sasl.enabled.mechanisms properties may also be set
# for one listener as listener.name.<lower-case listener name>.<property>, and the JAAS config
# for one listener and mechanism as listener.name.<listener>.<mechanism>.sasl.jaas.config.
SECURITY_CONFIGS = [
    ConfigDef(
        "listener.security.protocol.map",
        "string",
        ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS),
        "The security protocol of each listener name, as LISTENER_NAME:PROTOCOL pairs.",
        _valid_protocol_map,
    ),
    ConfigDef(
        "sasl.enabled.mechanisms",
        "list",
        # Kafka's default is GSSAPI, which Fjord does not implement; SCRAM needs no JAAS user
        # list (credentials live in the metadata store), so a SASL listener works out of the box.
        ["SCRAM-SHA-256", "SCRAM-SHA-512"],
        "The SASL mechanisms SASL listeners offer: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.",
        one_of(*SASL_MECHANISMS),
    ),
    ConfigDef(
        "connection.failed.authentication.delay.ms",
        "int",
        100,
        "How long a connection whose authentication failed stays open after its answer "
        "(KIP-306): it slows down clients retrying bad credentials, and every client reads "
        "the answer before the connection goes.",
        at_least(0),
    ),
    ConfigDef(
        "sasl.server.max.receive.size",
        "int",
        524288,
        "The largest frame a SASL connection may send before it has authenticated.",
        at_least(1),
    ),
    ConfigDef(
        "sasl.jaas.config",
        "password",
        None,
        'JAAS login module for SASL/PLAIN (user_<name>="<password>" options) on listeners '
        "without a listener.name.<l>.plain.sasl.jaas.config of their own.",
        _valid_jaas_config,
    ),
    ConfigDef(
        "ssl.keystore.type",
        "string",
        "JKS",
        "The key store's format; Fjord reads PEM only, so SSL listeners need PEM.",
    ),
    ConfigDef(
        "ssl.keystore.location",
        "string",
        None,
        "A PEM file with the private key and the certificate chain.",
    ),
    ConfigDef(
        "ssl.keystore.certificate.chain",
        "password",
        None,
        "The certificate chain as PEM text (with ssl.keystore.key, instead of a location).",
    ),
    ConfigDef("ssl.keystore.key", "password", None, "The private key as PEM text."),
    ConfigDef("ssl.key.password", "password", None, "The password of an encrypted private key."),
    ConfigDef(
        "ssl.truststore.type",
        "string",
        "JKS",
        "The trust store's format; Fjord reads PEM only.",
    ),
    ConfigDef(
        "ssl.truststore.location",
        "string",
        None,
        "A PEM file of CA certificates that client certificates are verified against (and, "
        "on the inter-broker listener, the other brokers' certificates).",
    ),
    ConfigDef(
        "ssl.truststore.certificates",
        "password",
        None,
        "CA certificates as PEM text (instead of, or with, a trust store location).",
    ),
    ConfigDef(
        "ssl.client.auth",
        "string",
        "none",
        "Whether SSL clients must (required), may (requested) or do not (none) present a "
        "certificate.",
        one_of(*CLIENT_AUTH_VALUES),
    ),
    ConfigDef(
        "ssl.endpoint.identification.algorithm",
        "string",
        "https",
        "How a broker connecting to another broker's SSL listener checks the host name in its "
        "certificate: https (it must name the host connected to) or empty (not checked).",
        one_of("https", ""),
    ),
    ConfigDef(
        "ssl.principal.mapping.rules",
        "string",
        "DEFAULT",
        "Rules mapping a client certificate's distinguished name to a user name: DEFAULT or "
        "RULE:pattern/replacement/[LU], separated by commas.",
        _valid_mapping_rules,
    ),
]
SECURITY_CONFIG_NAMES = frozenset(d.name for d in SECURITY_CONFIGS)
LISTENER_PREFIX = "listener.name."

BROKER_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        ConfigDef("node.id", "int", 1, "The node id of this broker.", at_least(0)),
        ConfigDef(
            "listeners",
            "list",
            ["PLAINTEXT://127.0.0.1:9092"],
            "Listener URIs to accept Kafka connections on.",
            _valid_listeners,
        ),
        ConfigDef(
            "advertised.listeners",
            "list",
            None,
            "Listeners published to clients in Metadata; defaults to listeners.",
            _valid_listeners,
        ),
        ConfigDef(
            "log.dirs", "list", ["/tmp/kafka-logs"], "Directories in which the log data is kept."
        ),
        ConfigDef(
            "num.partitions",
            "int",
            1,
            "Default number of partitions per topic.",
            at_least(1),
            dynamic=True,
        ),
        ConfigDef(
            "default.replication.factor",
            "short",
            1,
            "Default replication factor for automatically created topics.",
            at_least(1),
        ),
        ConfigDef(
            "auto.create.topics.enable",
            "boolean",
            True,
            "Create a topic when a client asks Metadata for one that does not exist.",
        ),
        ConfigDef("delete.topic.enable", "boolean", True, "Allow DeleteTopics."),
        ConfigDef(
            "log.retention.check.interval.ms",
            "long",
            300000,
            "How often the log manager applies retention.",
            at_least(1),
        ),
        ConfigDef(
            "log.cleaner.enable",
            "boolean",
            True,
            "Run the log cleaner, which compacts topics with cleanup.policy=compact, "
            "__consumer_offsets and __transaction_state included.",
        ),
        ConfigDef(
            "log.cleaner.backoff.ms",
            "long",
            15000,
            "How long the cleaner sleeps when no log needs cleaning.",
            at_least(0),
            dynamic=True,
        ),
        ConfigDef(
            "log.cleaner.dedupe.buffer.size",
            "long",
            134217728,
            "The memory the cleaner's key-to-offset map may use in one round.",
            at_least(1024),
            dynamic=True,
        ),
        ConfigDef(
            "log.cleaner.io.buffer.load.factor",
            "double",
            0.9,
            "How full the cleaner's key-to-offset map may get.",
            between(0.01, 1),
            dynamic=True,
        ),
        ConfigDef(
            "log.flush.scheduler.interval.ms",
            "long",
            LONG_MAX,
            "How often the log manager checks flush.ms.",
            at_least(1),
        ),
        ConfigDef(
            "log.flush.offset.checkpoint.interval.ms",
            "int",
            60000,
            "How often the recovery point is checkpointed.",
            at_least(0),
        ),
        ConfigDef(
            "producer.id.expiration.ms",
            "int",
            86400000,
            "How long a partition keeps an idle producer's state (epoch, last sequences) after "
            "its last batch.",
            at_least(1),
            dynamic=True,
        ),
        ConfigDef(
            "producer.id.expiration.check.interval.ms",
            "int",
            600000,
            "How often expired producer ids are removed.",
            at_least(1),
        ),
        ConfigDef(
            "transaction.state.log.num.partitions",
            "int",
            50,
            "The number of partitions of __transaction_state (fixed once created).",
            at_least(1),
        ),
        ConfigDef(
            "transaction.state.log.segment.bytes",
            "int",
            104857600,
            "The segment size of __transaction_state.",
            at_least(1),
        ),
        ConfigDef(
            "transaction.state.log.replication.factor",
            "short",
            3,
            "The replication factor of __transaction_state: in a cluster it is created once "
            "that many brokers are usable (a cluster of one broker makes it 1). A single "
            "broker keeps one replica.",
            at_least(1),
        ),
        ConfigDef(
            "transaction.state.log.min.isr",
            "int",
            2,
            "In a cluster, the min.insync.replicas of __transaction_state (at most its "
            "replication factor).",
            at_least(1),
        ),
        ConfigDef(
            "request.timeout.ms",
            "int",
            30000,
            "In a cluster, how long the transaction coordinator's writes and its "
            "WriteTxnMarkers requests to other brokers may take.",
            at_least(0),
        ),
        ConfigDef(
            "transaction.max.timeout.ms",
            "int",
            900000,
            "The longest transaction.timeout.ms a producer may ask for; longer ones get "
            "INVALID_TRANSACTION_TIMEOUT.",
            at_least(1),
        ),
        ConfigDef(
            "transactional.id.expiration.ms",
            "int",
            604800000,
            "How long a transactional id without an open transaction is kept after its last "
            "update.",
            at_least(1),
        ),
        ConfigDef(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "int",
            10000,
            "How often transactions open longer than their timeout are aborted.",
            at_least(1),
        ),
        ConfigDef(
            "transaction.two.phase.commit.enable",
            "boolean",
            False,
            "Allow producers to take part in two-phase commit (KIP-939): InitProducerId with "
            "enable2Pc, whose transactions never time out. Off, such a request gets "
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED.",
        ),
        ConfigDef(
            "transaction.partition.verification.enable",
            "boolean",
            True,
            "Check a transactional Produce of transaction version 1 against the coordinator "
            "(KIP-890 part 1): a partition the producer's ongoing transaction did not add "
            "takes none of its data.",
        ),
        ConfigDef(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            "int",
            3600000,
            "How often expired transactional ids are removed.",
            at_least(1),
        ),
        ConfigDef(
            "socket.request.max.bytes",
            "int",
            104857600,
            "The largest request frame the broker accepts.",
            at_least(1),
        ),
        ConfigDef(
            "max.request.partition.size.limit",
            "int",
            2000,
            "The most partitions a DescribeTopicPartitions response carries; the client asks "
            "for the rest with the response's cursor.",
            at_least(1),
        ),
        ConfigDef(
            "queued.max.requests",
            "int",
            5,
            "In-flight requests per connection before the broker stops reading from it. "
            "Kafka takes one request of a connection at a time and reads the next once it "
            "has answered; Fjord takes as many as a producer pipelines (5 by default in "
            "Kafka's clients and in librdkafka with idempotence). Deeper pipelines add "
            "nothing but held memory: megabyte produce requests waiting for acks=all.",
            at_least(1),
        ),
        ConfigDef(
            "max.connections",
            "int",
            INT_MAX,
            "The most client connections the broker keeps open; newer ones are closed at once.",
            at_least(0),
            dynamic=True,
        ),
        ConfigDef(
            "max.connections.per.ip",
            "int",
            INT_MAX,
            "The most connections from one client address.",
            at_least(0),
            dynamic=True,
        ),
        ConfigDef(
            "max.connections.per.ip.overrides",
            "string",
            "",
            "Per-address exceptions to max.connections.per.ip, as host:count,host:count.",
            _valid_connection_overrides,
            dynamic=True,
        ),
        ConfigDef(
            "quota.window.num",
            "int",
            11,
            "Samples kept in memory for client quotas (their rates span this many windows).",
            at_least(1),
        ),
        ConfigDef(
            "quota.window.size.seconds",
            "int",
            1,
            "The time span of each sample of client quotas.",
            at_least(1),
        ),
        ConfigDef(
            "controller.quota.window.num",
            "int",
            11,
            "Samples kept for controller mutation quotas (their burst spans this many windows).",
            at_least(1),
        ),
        ConfigDef(
            "controller.quota.window.size.seconds",
            "int",
            1,
            "The time span of each sample of controller mutation quotas.",
            at_least(1),
        ),
        ConfigDef(
            "connections.max.idle.ms",
            "long",
            600000,
            "Close a connection that has sent no request for this long; -1 never does.",
        ),
        ConfigDef(
            "max.incremental.fetch.session.cache.slots",
            "int",
            1000,
            "The most incremental fetch sessions (KIP-227) the broker keeps; 0 disables them.",
            at_least(0),
        ),
        ConfigDef(
            "metrics.listener",
            "string",
            "http://127.0.0.1:9308/metrics",
            "Where the Prometheus text endpoint listens; empty disables it.",
        ),
        ConfigDef(
            "cluster.id",
            "string",
            None,
            "Cluster id; generated and stored in the metadata store when unset.",
        ),
        ConfigDef(
            "metadata.store.url",
            # A password type, as Kafka's configs that carry credentials: the URL holds the
            # database's password, and the database is often the control plane's own.
            "password",
            "",
            "Fjord's: where the cluster metadata lives. Empty keeps it in an embedded SQLite "
            "file in the first log dir (a single broker); a postgresql:// URL makes this broker "
            "one of the cluster of every broker sharing that database.",
            _valid_store_url,
        ),
        ConfigDef(
            "broker.session.timeout.ms",
            "int",
            9000,
            "How long a broker's lease in the metadata store lasts without a heartbeat; the "
            "controller fences a broker whose lease lapsed.",
            at_least(1),
        ),
        ConfigDef(
            "controlled.shutdown.enable",
            "boolean",
            True,
            "In a cluster, hand every partition led here to another in-sync replica before "
            "stopping.",
        ),
        ConfigDef(
            "auto.leader.rebalance.enable",
            "boolean",
            True,
            "In a cluster, the controller moves leadership back to each partition's preferred "
            "replica when it is in sync, every leader.imbalance.check.interval.seconds.",
        ),
        ConfigDef(
            "leader.imbalance.check.interval.seconds",
            "long",
            300,
            "How often the controller restores preferred leaders.",
            at_least(1),
        ),
        ConfigDef(
            "broker.heartbeat.interval.ms",
            "int",
            2000,
            "How often a broker renews its lease (and the controller its own).",
            at_least(1),
        ),
        ConfigDef(
            "replica.lag.time.max.ms",
            "long",
            30000,
            "A follower that has not caught up with the leader's log end for this long leaves "
            "the ISR.",
            at_least(1),
        ),
        ConfigDef(
            "replica.fetch.max.bytes",
            "int",
            1048576,
            "Bytes a follower asks of each partition per fetch (the first batch goes whole).",
            at_least(0),
        ),
        ConfigDef(
            "replica.fetch.response.max.bytes",
            "int",
            10485760,
            "Bytes a follower asks for per fetch response.",
            at_least(0),
        ),
        ConfigDef(
            "replica.fetch.wait.max.ms",
            "int",
            500,
            "How long a follower's fetch waits at the leader for data.",
            at_least(0),
        ),
        ConfigDef(
            "replica.fetch.min.bytes",
            "int",
            1,
            "Bytes a follower's fetch waits for.",
            at_least(1),
        ),
        ConfigDef(
            "num.replica.fetchers",
            "int",
            1,
            "Fetch sessions a follower opens to each leader; its partitions are spread over them.",
            at_least(1),
        ),
        ConfigDef(
            "replica.fetch.backoff.ms",
            "int",
            1000,
            "How long a follower waits before fetching again after an error.",
            at_least(0),
        ),
        ConfigDef(
            "inter.broker.listener.name",
            "string",
            None,
            "The listener the brokers of a cluster connect to each other on (followers' "
            "fetches, transaction markers), with its security protocol; unset, the first of "
            "listeners.",
        ),
        ConfigDef(
            "sasl.mechanism.inter.broker.protocol",
            "string",
            # Kafka's default is GSSAPI, which Fjord does not implement.
            "PLAIN",
            "The SASL mechanism brokers authenticate to each other with on a SASL inter-broker "
            "listener; a broker's own credentials are the username and password options of "
            "that listener's JAAS config for the mechanism.",
            one_of(*SASL_MECHANISMS),
        ),
        ConfigDef(
            "authorizer.class.name",
            "string",
            "",
            "The authorizer: empty for none (every request allowed), or Kafka's "
            f"{STANDARD_AUTHORIZER} (or its old name {ACL_AUTHORIZER}) for ACLs.",
            one_of("", STANDARD_AUTHORIZER, ACL_AUTHORIZER),
        ),
        ConfigDef(
            "super.users",
            "string",
            "",
            "Principals, separated by semicolons, that every ACL check allows.",
        ),
        ConfigDef(
            "allow.everyone.if.no.acl.found",
            "boolean",
            False,
            "Allow a request on a resource that no ACL mentions.",
        ),
        *GROUP_COORDINATOR_CONFIGS,
        *SECURITY_CONFIGS,
    ]
}
for _name, _synonym, _type, _default, _validator, _doc in _TOPIC:
    BROKER_CONFIGS.setdefault(
        _synonym, ConfigDef(_synonym, _type, _default, _doc, _validator, dynamic=True)
    )

# Kafka's alternative spellings of a few broker defaults, in order of precedence under the
# milliseconds property: log.retention.minutes/hours and log.roll.hours still appear in real
# server.properties files.
_ALIASES = {
    "log.retention.minutes": ("log.retention.ms", 60_000),
    "log.retention.hours": ("log.retention.ms", 3_600_000),
    "log.roll.hours": ("log.roll.ms", 3_600_000),
    "log.dir": ("log.dirs", None),
}


class BrokerConfig:
    """Parsed, validated broker properties. Static values come from the file and overrides;
    dynamic ones may be replaced at run time (DYNAMIC_BROKER_CONFIG)."""

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        self.static: dict[str, object] = {}
        self.dynamic: dict[str, object] = {}
        self.listener_overrides: dict[tuple[str, str], object] = {}
        explicit = dict(props or {})
        resolved: dict[str, str] = {}
        for key, raw in explicit.items():
            if key in _ALIASES:
                target, scale = _ALIASES[key]
                if target in explicit:
                    continue  # the more precise property wins, as in Kafka
                if scale is not None:
                    try:
                        raw = str(int(raw) * scale)
                    except ValueError:
                        raise ConfigError(
                            f"Invalid value {raw} for configuration {key}: not a valid long"
                        ) from None
                resolved.setdefault(target, raw)
            elif key in BROKER_CONFIGS:
                resolved[key] = raw
            elif key.startswith(LISTENER_PREFIX):
                self._set_listener_override(key, raw)
            else:
                raise ConfigError(f"Unknown configuration {key!r}")
        for key, raw in resolved.items():
            self.static[key] = BROKER_CONFIGS[key].parse(raw)
        protocols = self.listener_security_protocols()
        for name, _, _ in self.listeners():
            if name not in protocols:
                raise ConfigError(
                    f"Invalid value for configuration listeners: no security protocol defined "
                    f"for listener {name} in listener.security.protocol.map"
                )
        names = [name for name, _, _ in self.advertised_listeners()]
        if (
            self["inter.broker.listener.name"] is not None
            and self.inter_broker_listener not in names
        ):
            raise ConfigError(
                "inter.broker.listener.name must be a listener name defined in "
                "advertised.listeners. The valid options based on currently configured "
                f"listeners are {','.join(names)}"
            )

    def _set_listener_override(self, key: str, raw: str) -> None:
        """listener.name.<listener>.<property> (or .<mechanism>.sasl.jaas.config)."""
        listener, _, name = key[len(LISTENER_PREFIX) :].partition(".")
        mechanism, _, rest = name.partition(".")
        if rest == "sasl.jaas.config" and mechanism.upper() in SASL_MECHANISMS:
            definition = BROKER_CONFIGS["sasl.jaas.config"]
        elif name in SECURITY_CONFIG_NAMES and name != "listener.security.protocol.map":
            definition = BROKER_CONFIGS[name]
        elif name == "max.connections":  # Kafka's limit for one listener
            definition = BROKER_CONFIGS[name]
        else:
            raise ConfigError(f"Unknown configuration {key!r}")
        try:
            self.listener_overrides[(listener, name)] = definition.parse(raw)
        except ConfigError as e:
            raise ConfigError(f"{key}: {e}") from None

    def listener_security_protocols(self) -> dict[str, str]:
        return parse_protocol_map(self["listener.security.protocol.map"])

    def listener_value(self, listener: str, name: str, prefixed_only: bool = False) -> object:
        """A security property for one listener: listener.name.<listener lower-case>.<name>
        if set, else (unless prefixed_only) the broker-wide value."""
        key = (listener.lower(), name)
        if key in self.listener_overrides:
            return self.listener_overrides[key]
        return None if prefixed_only else self[name]

    def __getitem__(self, name: str) -> object:
        if name in self.dynamic:
            return self.dynamic[name]
        if name in self.static:
            return self.static[name]
        return BROKER_CONFIGS[name].default

    def source(self, name: str) -> str:
        if name in self.dynamic:
            return "dynamic"
        return "static" if name in self.static else "default"

    @property
    def node_id(self) -> int:
        return self["node.id"]  # type: ignore[return-value]

    @property
    def log_dirs(self) -> list[Path]:
        return [Path(d) for d in self["log.dirs"]]  # type: ignore[union-attr]

    def listeners(self) -> list[tuple[str, str, int]]:
        return [_split_listener(item) for item in self["listeners"]]  # type: ignore[union-attr]

    @property
    def inter_broker_listener(self) -> str:
        """The listener other brokers are reached on: inter.broker.listener.name, or the
        first of listeners."""
        name = self["inter.broker.listener.name"]
        if not name:
            return self.listeners()[0][0]
        # Kafka's listener names are case-insensitive (ListenerName.normalised).
        named = [n for n, _, _ in self.advertised_listeners() if n.upper() == str(name).upper()]
        return named[0] if named else str(name)

    def advertised_listeners(self) -> list[tuple[str, str, int]]:
        advertised = self["advertised.listeners"]
        return [_split_listener(i) for i in advertised] if advertised else self.listeners()

    def topic_defaults(self) -> dict[str, object]:
        return {name: self[synonym] for name, synonym in TOPIC_TO_BROKER.items()}

    def set_dynamic(self, values: Mapping[str, object]) -> None:
        """Replace the dynamic broker configs as a whole (values already validated)."""
        self.dynamic = dict(values)


def _split_listener(item: str) -> tuple[str, str, int]:
    m = LISTENER_RE.match(item)
    assert m is not None  # validated at parse time
    return m["name"], m["host"].strip("[]"), int(m["port"])


def validate_dynamic_broker_configs(values: Mapping[str, str | None]) -> dict[str, object]:
    parsed: dict[str, object] = {}
    for name, raw in values.items():
        d = BROKER_CONFIGS.get(name)
        if d is None:
            raise ConfigError(f"Unknown broker configuration {name!r}")
        if not d.dynamic:
            raise ConfigError(f"Cannot update configuration {name!r} dynamically")
        if raw is not None:
            parsed[name] = d.parse(raw)
    return parsed


# Per-group configs (KIP-848), overriding the broker's defaults for one consumer group and
# bounded by the broker's min/max.
GROUP_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        ConfigDef(
            "consumer.session.timeout.ms",
            "int",
            45000,
            "The session timeout of the group's consumer-protocol members.",
            at_least(1),
            dynamic=True,
        ),
        ConfigDef(
            "consumer.heartbeat.interval.ms",
            "int",
            5000,
            "The heartbeat interval of the group's consumer-protocol members.",
            at_least(1),
            dynamic=True,
        ),
    ]
}
GROUP_TO_BROKER = {
    "consumer.session.timeout.ms": "group.consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms",
}
_GROUP_BOUNDS = {
    "consumer.session.timeout.ms": (
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
    ),
    "consumer.heartbeat.interval.ms": (
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
    ),
}


def validate_group_configs(
    values: Mapping[str, str | None], broker: BrokerConfig
) -> dict[str, object]:
    parsed = _parse_resource_configs(values, GROUP_CONFIGS, "group")
    for name, value in parsed.items():
        low, high = (broker[b] for b in _GROUP_BOUNDS[name])
        if not low <= value <= high:  # type: ignore[operator]
            raise ConfigError(
                f"{name} must be between {_GROUP_BOUNDS[name][0]}={low} and "
                f"{_GROUP_BOUNDS[name][1]}={high}, got {value}"
            )
    session = parsed.get("consumer.session.timeout.ms", broker["group.consumer.session.timeout.ms"])
    heartbeat = parsed.get(
        "consumer.heartbeat.interval.ms", broker["group.consumer.heartbeat.interval.ms"]
    )
    if heartbeat >= session:  # type: ignore[operator]
        raise ConfigError(
            "consumer.heartbeat.interval.ms must be less than consumer.session.timeout.ms"
        )
    return parsed


def validate_topic_configs(values: Mapping[str, str | None]) -> dict[str, object]:
    parsed = _parse_resource_configs(values, TOPIC_CONFIGS, "topic")
    low, high = parsed.get("min.compaction.lag.ms"), parsed.get("max.compaction.lag.ms")
    if low is not None and high is not None and low > high:  # type: ignore[operator]
        raise ConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({low}) > "
            f"max.compaction.lag.ms ({high})"
        )
    return parsed


def _parse_resource_configs(
    values: Mapping[str, str | None], defs: Mapping[str, ConfigDef], kind: str
) -> dict[str, object]:
    parsed: dict[str, object] = {}
    for name, raw in values.items():
        d = defs.get(name)
        if d is None:
            raise ConfigError(f"Unknown {kind} config name: {name}")
        if raw is None:
            raise ConfigError(f"Null value not supported for {kind} config: {name}")
        parsed[name] = d.parse(raw)
    return parsed


def render(value: object) -> str | None:
    """A config value as Kafka shows it in DescribeConfigs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def read_properties(path: Path) -> dict[str, str]:
    """Java .properties: key=value or key:value, # and ! comments, backslash continuation."""
    props: dict[str, str] = {}
    pending = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped[0] in "#!"):
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending += stripped[:-1]
            continue
        logical = pending + stripped
        pending = ""
        m = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", logical)
        if not m:
            raise ConfigError(f"{path}: cannot parse line {line!r}")
        props[m[1]] = m[2]
    return props


def read_broker_config(properties: Path | None, overrides: Iterable[str]) -> BrokerConfig:
    """A server.properties file, if any, with --override key=value items on top: the
    configuration of `python -m broker` and its tools. A ConfigError quoting a line or a value
    back has any credential in it masked (OSError: the file cannot be read)."""
    from broker.redaction import redact

    try:
        props = read_properties(properties) if properties else {}
        props.update(parse_overrides(overrides))
        return BrokerConfig(props)
    except ConfigError as e:
        raise ConfigError(redact(str(e))) from None


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    props = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override expects key=value, got {item!r}")
        props[key.strip()] = value.strip()
    return props
