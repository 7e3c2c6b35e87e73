"""The options of the `fjord` format, as Spark's Kafka connector names them, checked before a
query starts: an unknown option, a missing or contradictory one, or a bad value raises
OptionError naming it.

Spark hands a data source its options as strings in a case-insensitive map; `kafka.`-prefixed
ones configure the Kafka client (`kafka.bootstrap.servers`, `kafka.security.protocol`,
`kafka.sasl.jaas.config`, `kafka.linger.ms` ...)."""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.client.consumer.config import CONSUMER_OPTIONS
from broker.client.options import Option
from broker.client.producer.config import PRODUCER_OPTIONS
from broker.client.session import Security

EARLIEST, LATEST = -2, -1  # as Spark's offset JSON writes them


class OptionError(ValueError):
    """A `fjord` format option that is unknown, missing or invalid; names the option."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"option '{option}': {message}")
        self.option = option


# Spark's own options, which it passes on to every data source: not ours to check.
SPARK_OPTIONS = {"path", "checkpointlocation", "queryname"}


def lower(options: Mapping[str, str]) -> dict[str, str]:
    return {
        key.lower(): value for key, value in options.items() if key.lower() not in SPARK_OPTIONS
    }


def boolean(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name.lower())
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise OptionError(name, f"expected true or false, got {value!r}")
    return value.strip().lower() == "true"


def positive(options: Mapping[str, str], name: str) -> int | None:
    value = options.get(name.lower())
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise OptionError(name, f"expected a number, got {value!r}") from None
    if number <= 0:
        raise OptionError(name, f"must be positive, got {number}")
    return number


def json_option(options: Mapping[str, str], name: str) -> Any:
    try:
        return json.loads(options[name.lower()])
    except ValueError as e:
        raise OptionError(name, f"invalid JSON: {e}") from None


# -- the Kafka client's options ----------------------------------------------------------------

# Options the connector sets itself (Spark refuses the same).
CONNECTOR_OWNED = {
    "group.id",
    "auto.offset.reset",
    "enable.auto.commit",
    "key.deserializer",
    "value.deserializer",
    "key.serializer",
    "value.serializer",
    "interceptor.classes",
    "transactional.id",
}
SECURITY_OPTIONS = {
    "security.protocol",
    "sasl.mechanism",
    "sasl.jaas.config",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.endpoint.identification.algorithm",
}
JAAS_FIELD = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ClientOptions:
    """What the Kafka client gets: its bootstrap servers, its security and its own options
    (typed as the client's option table wants them). Picklable, as Spark ships it to tasks."""

    bootstrap_servers: str
    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # never in a log or traceback
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    check_hostname: bool = True
    options: dict[str, Any] = field(default_factory=dict)

    def security(self) -> Security:
        context = None
        if self.protocol.endswith("SSL"):
            context = ssl.create_default_context(cafile=self.ca_location)
            context.check_hostname = self.check_hostname
            if self.certificate_location:
                context.load_cert_chain(self.certificate_location, self.key_location)
        return Security(self.protocol, context, self.sasl_mechanism, self.username, self.password)


def client_options(options: Mapping[str, str], table: Mapping[str, Option]) -> ClientOptions:
    """The `kafka.*` options for a client whose option table is `table`."""
    servers = options.get("kafka.bootstrap.servers")
    if not servers:
        raise OptionError("kafka.bootstrap.servers", "must be given")
    security: dict[str, Any] = {}
    typed: dict[str, Any] = {}
    for key, value in options.items():
        if not key.startswith("kafka.") or key == "kafka.bootstrap.servers":
            continue
        name = key.removeprefix("kafka.")
        if name in CONNECTOR_OWNED:
            raise OptionError(key, "is set by the fjord connector and cannot be given")
        if name in SECURITY_OPTIONS:
            security[name] = value
            continue
        option = table.get(name.replace(".", "_"))
        if option is None:
            raise OptionError(key, "unknown Kafka client option")
        typed[name.replace(".", "_")] = _typed(key, value, option)
    jaas = dict(JAAS_FIELD.findall(security.get("sasl.jaas.config", "")))
    protocol = security.get("security.protocol", "PLAINTEXT").upper()
    try:
        result = ClientOptions(
            servers,
            protocol,
            security.get("sasl.mechanism", "PLAIN").upper(),
            jaas.get("username"),
            jaas.get("password"),
            security.get("ssl.ca.location"),
            security.get("ssl.certificate.location"),
            security.get("ssl.key.location"),
            security.get("ssl.endpoint.identification.algorithm", "https") != "",
            typed,
        )
        result.security()  # checks the combination now, not in a task
    except (ValueError, OSError) as e:
        raise OptionError("kafka.security.protocol", str(e)) from None
    return result


def _typed(key: str, value: str, option: Option) -> Any:
    """A string option as the client's table wants it: its default's type, checked there."""
    default = option.default
    try:
        if isinstance(default, bool):
            if value.lower() not in ("true", "false"):
                raise ValueError(f"expected true or false, got {value!r}")
            typed: Any = value.lower() == "true"
        elif isinstance(default, int) and value.lstrip("-").isdigit():
            typed = int(value)
        else:
            typed = value
        return option.check(typed)
    except ValueError as e:
        raise OptionError(key, str(e)) from None


# -- the source ------------------------------------------------------------------------------

SOURCE_OPTIONS = {
    "kafka.bootstrap.servers",
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestampstrategy",
    "failondataloss",
    "maxoffsetspertrigger",
    "minpartitions",
    "includeheaders",
    "kafkaconsumer.polltimeoutms",
}
TOPIC_OPTIONS = ("subscribe", "subscribePattern", "assign")


@dataclass(frozen=True)
class Subscription:
    """Which partitions a query reads: named topics, a pattern (Java regex, matched whole, as
    Pattern.matcher().matches()), or explicit partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


# Where reading starts or ends: "earliest", "latest", offsets per partition ({topic: {p: n}},
# -2 earliest, -1 latest), or timestamps (one for every partition, or per partition).
OffsetSpec = str | dict[tuple[str, int], int]


@dataclass(frozen=True)
class TimestampSpec:
    timestamps: dict[tuple[str, int], int] | int
    # What a partition with no record at or after the timestamp gets: an error, or its end.
    strategy: str = "error"

    def timestamp_for(self, tp: tuple[str, int]) -> int | None:
        if isinstance(self.timestamps, int):
            return self.timestamps
        return self.timestamps.get(tp)


@dataclass(frozen=True)
class SourceOptions:
    client: ClientOptions
    subscription: Subscription
    starting: OffsetSpec | TimestampSpec
    ending: OffsetSpec | TimestampSpec
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    include_headers: bool = False
    read_committed: bool = False
    poll_timeout_ms: int = 120_000


def source_options(given: Mapping[str, str], streaming: bool) -> SourceOptions:
    options = lower(given)
    unknown = sorted(k for k in options if k not in SOURCE_OPTIONS and not k.startswith("kafka."))
    if unknown:
        raise OptionError(unknown[0], "unknown option of the fjord source")
    client = client_options(options, CONSUMER_OPTIONS)
    if streaming:
        for name in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"):
            if name.lower() in options:
                raise OptionError(name, "is for batch queries only")
    elif "maxoffsetspertrigger" in options:
        raise OptionError("maxOffsetsPerTrigger", "is for streaming queries only")
    starting = _starting(options, streaming)
    ending = _ending(options) if not streaming else LATEST_SPEC
    isolation = client.options.pop("isolation_level", "read_uncommitted")
    return SourceOptions(
        client=client,
        subscription=_subscription(options),
        starting=starting,
        ending=ending,
        fail_on_data_loss=boolean(options, "failOnDataLoss", True),
        max_offsets_per_trigger=positive(options, "maxOffsetsPerTrigger"),
        min_partitions=positive(options, "minPartitions"),
        include_headers=boolean(options, "includeHeaders", False),
        read_committed=isolation == "read_committed",
        poll_timeout_ms=positive(options, "kafkaConsumer.pollTimeoutMs") or 120_000,
    )


LATEST_SPEC = "latest"


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [name for name in TOPIC_OPTIONS if name.lower() in options]
    if len(given) != 1:
        raise OptionError(
            "subscribe",
            "exactly one of subscribe, subscribePattern and assign must be given"
            + (f" (given: {', '.join(given)})" if given else ""),
        )
    name = given[0]
    value = options[name.lower()]
    if name == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(name, "names no topic")
        return Subscription(topics=topics)
    if name == "subscribePattern":
        try:
            re.compile(value)
        except re.error as e:
            raise OptionError(name, f"invalid pattern: {e}") from None
        return Subscription(pattern=value)
    assigned = json_option(options, name)
    if not isinstance(assigned, dict) or not all(
        isinstance(ps, list) and all(isinstance(p, int) for p in ps) for ps in assigned.values()
    ):
        raise OptionError(name, 'expected JSON like {"topicA":[0,1],"topicB":[2,4]}')
    partitions = tuple((t, p) for t, ps in assigned.items() for p in ps)
    if not partitions:
        raise OptionError(name, "names no partition")
    return Subscription(partitions=partitions)


def _starting(options: Mapping[str, str], streaming: bool) -> OffsetSpec | TimestampSpec:
    by_time = _timestamps(options, "startingTimestamp", "startingOffsetsByTimestamp")
    if by_time is not None:
        return by_time
    spec = _offsets(options, "startingOffsets", "latest" if streaming else "earliest")
    if spec == "latest" and not streaming:
        raise OptionError("startingOffsets", "cannot be latest for batch queries")
    if isinstance(spec, dict) and not streaming and LATEST in spec.values():
        raise OptionError("startingOffsets", "cannot be latest (-1) for batch queries")
    return spec


def _ending(options: Mapping[str, str]) -> OffsetSpec | TimestampSpec:
    by_time = _timestamps(options, "endingTimestamp", "endingOffsetsByTimestamp")
    if by_time is not None:
        return by_time
    spec = _offsets(options, "endingOffsets", "latest")
    if spec == "earliest" or (isinstance(spec, dict) and EARLIEST in spec.values()):
        raise OptionError("endingOffsets", "cannot be earliest for batch queries")
    return spec


def _offsets(options: Mapping[str, str], name: str, default: str) -> OffsetSpec:
    value = options.get(name.lower(), default).strip()
    if value.lower() in ("earliest", "latest"):
        return value.lower()
    offsets = json_option(options, name)
    return _per_partition(name, offsets, minimum=EARLIEST)


def _timestamps(
    options: Mapping[str, str], single: str, per_partition: str
) -> TimestampSpec | None:
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError("startingOffsetsByTimestampStrategy", "must be error or latest")
    if single.lower() in options:
        value = options[single.lower()]
        try:
            timestamp = int(value)
        except ValueError:
            raise OptionError(
                single, f"expected milliseconds since the epoch, got {value!r}"
            ) from None
        if timestamp < 0:
            raise OptionError(single, "must not be negative")
        return TimestampSpec(timestamp, strategy)
    if per_partition.lower() in options:
        found = _per_partition(per_partition, json_option(options, per_partition), minimum=0)
        return TimestampSpec(found, strategy)
    return None


def _per_partition(name: str, value: Any, minimum: int) -> dict[tuple[str, int], int]:
    """{"topic": {"0": n}} as Spark writes offsets and timestamps per partition."""
    example = 'expected JSON like {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    if not isinstance(value, dict):
        raise OptionError(name, example)
    found: dict[tuple[str, int], int] = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict):
            raise OptionError(name, example)
        for partition, number in partitions.items():
            try:
                key = (topic, int(partition))
            except ValueError:
                raise OptionError(name, f"{partition!r} is not a partition number") from None
            if isinstance(number, bool) or not isinstance(number, int) or number < minimum:
                raise OptionError(name, f"invalid value {number!r} for {topic}-{partition}")
            found[key] = number
    return found


# -- the sink --------------------------------------------------------------------------------

SINK_OPTIONS = {"kafka.bootstrap.servers", "topic", "exactlyonce", "transactionalidprefix"}


@dataclass(frozen=True)
class SinkOptions:
    client: ClientOptions
    topic: str | None
    exactly_once: bool
    transactional_id_prefix: str | None
    # A pipeline's sink (not an option of the format): its topic is the only one it writes,
    # and a 'topic' column, which the `topic` option would override, is refused outright.
    pinned_topic: bool = False


def sink_options(given: Mapping[str, str]) -> SinkOptions:
    options = lower(given)
    unknown = sorted(k for k in options if k not in SINK_OPTIONS and not k.startswith("kafka."))
    if unknown:
        raise OptionError(unknown[0], "unknown option of the fjord sink")
    client = client_options(options, PRODUCER_OPTIONS)
    exactly_once = boolean(options, "exactlyOnce", False)
    prefix = options.get("transactionalidprefix") or None
    if exactly_once and prefix is None:
        raise OptionError(
            "transactionalIdPrefix",
            "must be given with exactlyOnce=true: it names the query's transactions, the same "
            "on every restart of the query and unique among queries",
        )
    if prefix is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", prefix):
        raise OptionError(
            "transactionalIdPrefix",
            "up to 200 letters, digits, '.', '_' and '-' (it names a topic)",
        )
    if prefix is not None and not exactly_once:
        raise OptionError("transactionalIdPrefix", "is for exactlyOnce=true only")
    return SinkOptions(client, options.get("topic") or None, exactly_once, prefix)


def exactly_once(bootstrap: str, topic: str, prefix: str, checkpoint: str) -> dict[str, str]:
    """The sink's options for an exactly-once copy into `topic`."""
    return {
        "kafka.bootstrap.servers": bootstrap,
        "topic": topic,
        "exactlyOnce": "true",
        "transactionalIdPrefix": prefix,
        "checkpointLocation": checkpoint,
    }


def read_committed(bootstrap: str, topic: str, **more: str) -> dict[str, str]:
    """The source's options for reading `topic`'s committed records."""
    return {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "kafka.isolation.level": "read_committed",
        **more,
    }
