"""The producer's options: the Java client's names and Kafka 4's defaults, with its rules
between them (idempotence needs acks=all, retries and at most five requests in flight)."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from broker.client.options import (
    COMMON_OPTIONS,
    INT32_MAX,
    ConfigError,
    Option,
    boolean,
    compression_type,
    integer,
    optional,
    parse_options,
    text,
)

ACKS_ALL = -1
# Kafka refuses more for an idempotent producer: the broker keeps the last five batches of a
# producer per partition to answer a retried one as a duplicate.
MAX_IN_FLIGHT_FOR_IDEMPOTENCE = 5

_ACKS = {"all": ACKS_ALL, "-1": ACKS_ALL, "0": 0, "1": 1, -1: ACKS_ALL, 0: 0, 1: 1}


def acks(value: Any) -> int:
    """ "all", -1, 0 or 1 (numbers as strings too, as in a properties file) -> -1, 0 or 1."""
    if isinstance(value, bool) or value not in _ACKS:
        raise ValueError(f"{value!r} is not one of 'all', -1, 0, 1")
    return _ACKS[value]


PRODUCER_OPTIONS: dict[str, Option] = {
    **COMMON_OPTIONS,
    "acks": Option(ACKS_ALL, acks),
    "batch_size": Option(16_384, integer(0, INT32_MAX)),
    "buffer_memory": Option(33_554_432, integer(0)),
    "compression_type": Option("none", compression_type),
    "delivery_timeout_ms": Option(120_000, integer(0, INT32_MAX)),
    "enable_idempotence": Option(True, boolean),
    "linger_ms": Option(5, integer(0, INT32_MAX)),
    "max_block_ms": Option(60_000, integer(0)),
    "max_in_flight_requests_per_connection": Option(5, integer(1)),
    "max_request_size": Option(1_048_576, integer(0, INT32_MAX)),
    "partitioner_ignore_keys": Option(False, boolean),
    "retries": Option(INT32_MAX, integer(0, INT32_MAX)),
    "retry_backoff_max_ms": Option(1_000, integer(0)),
    "transaction_timeout_ms": Option(60_000, integer(1, INT32_MAX)),
    "transaction_two_phase_commit_enable": Option(False, boolean),
    "transactional_id": Option(None, optional(text)),
}


def producer_config(given: Mapping[str, Any]) -> SimpleNamespace:
    """Checked options. An idempotence left at its default is switched off by settings it
    cannot work with; asked for explicitly (or implied by a transactional id) it makes them an
    error, as ProducerConfig does."""
    config = parse_options(PRODUCER_OPTIONS, given)
    conflicts = [
        (name, why)
        for name, why in (
            ("acks", "must be all (-1)"),
            ("retries", "must be above 0"),
            ("max_in_flight_requests_per_connection", "must be at most 5"),
        )
        if not _fits_idempotence(name, getattr(config, name))
    ]
    explicit = "enable_idempotence" in given
    if config.transactional_id is not None and not config.enable_idempotence:
        raise ConfigError("enable_idempotence", "a transactional producer must be idempotent")
    if conflicts and config.enable_idempotence:
        if explicit or config.transactional_id is not None:
            name, why = conflicts[0]
            raise ConfigError(name, f"{why} for an idempotent or transactional producer")
        config.enable_idempotence = False
    floor = config.linger_ms + config.request_timeout_ms
    if config.delivery_timeout_ms < floor:
        # Kafka raises a default it would undercut, and refuses an explicit one.
        if "delivery_timeout_ms" in given:
            raise ConfigError(
                "delivery_timeout_ms", "must be at least linger_ms + request_timeout_ms"
            )
        config.delivery_timeout_ms = floor
    if config.transaction_two_phase_commit_enable and config.transactional_id is None:
        raise ConfigError("transaction_two_phase_commit_enable", "needs a transactional_id")
    return config


def _fits_idempotence(name: str, value: int) -> bool:
    if name == "acks":
        return value == ACKS_ALL
    if name == "retries":
        return value > 0
    return value <= MAX_IN_FLIGHT_FOR_IDEMPOTENCE
