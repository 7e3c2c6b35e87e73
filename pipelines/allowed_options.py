"""Which source options a pipeline's definition may set: only those that shape how it reads
(rate limits, partitioning, data-loss handling, headers, poll timeouts, fetch sizes). Where it
connects, as whom and over what security is the control plane's to say (it applies its
connection settings last); what it reads is the definition's (source topics or pattern,
starting offsets, read_committed). Anything else is refused naming the option, so that a
pipeline can neither send the credentials it runs with to another host nor read as anyone
else."""

from __future__ import annotations

from collections.abc import Iterable

from pipelines.spark.options import OptionError

ALLOWED = (
    # Spark's Kafka source options that shape the read, as the fjord source takes them.
    "maxOffsetsPerTrigger",
    "minPartitions",
    "failOnDataLoss",
    "includeHeaders",
    "kafkaConsumer.pollTimeoutMs",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    # Consumer settings that tune fetching and retrying, not the connection.
    "kafka.fetch.min.bytes",
    "kafka.fetch.max.wait.ms",
    "kafka.fetch.max.bytes",
    "kafka.max.partition.fetch.bytes",
    "kafka.metadata.max.age.ms",
    "kafka.request.timeout.ms",
    "kafka.retries",
    "kafka.retry.backoff.ms",
    "kafka.client.rack",
)
# Options the pipeline's own fields set (Spark takes option names case-insensitively).
DEFINED = {
    "subscribe": "source_topics",
    "subscribepattern": "source_pattern",
    "assign": "source_topics",
    "startingoffsets": "starting_offsets",
    "kafka.isolation.level": "the pipeline (read_committed)",
}
_ALLOWED = {name.lower() for name in ALLOWED}


def check_pipeline_options(names: Iterable[str]) -> None:
    """Raises OptionError naming the first option a pipeline may not set."""
    for name in sorted(names):
        key = name.lower()
        if key in _ALLOWED:
            continue
        if key in DEFINED:
            raise OptionError(name, f"is set by {DEFINED[key]}, not by options")
        if key.startswith("kafka."):
            raise OptionError(
                name,
                "a pipeline may not set where or how it connects (servers, security, "
                "credentials, client identity): the control plane does",
            )
        raise OptionError(name, f"not an option a pipeline may set (allowed: {', '.join(ALLOWED)})")
