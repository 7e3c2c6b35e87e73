"""Client options: the Java client's property names with dots as underscores, Kafka's defaults,
checked at construction.

A client declares its options as a table of `Option`s; `parse_options` takes the caller's
keyword arguments and answers a namespace of checked values, or raises `ConfigError` naming
the option (as the Java client's ConfigException does) for an unknown name or a bad value.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from broker.records import compression as codecs

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1


class ConfigError(ValueError):
    """An unknown option or an invalid value; `option` is the keyword's name."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option} ({kafka_name(option)}): {message}")
        self.option = option


def kafka_name(option: str) -> str:
    """`linger_ms` -> `linger.ms`: the Java client's name for a keyword option."""
    return option.replace("_", ".")


Check = Callable[[Any], Any]  # returns the value to keep, or raises ValueError with why


@dataclass(frozen=True)
class Option:
    default: Any
    check: Check


def integer(low: int | None = None, high: int | None = None) -> Check:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {value!r}")
        if low is not None and value < low:
            raise ValueError(f"{value} is below the minimum {low}")
        if high is not None and value > high:
            raise ValueError(f"{value} is above the maximum {high}")
        return value

    return check


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected True or False, got {value!r}")
    return value


def choice(*allowed: Any) -> Check:
    def check(value: Any) -> Any:
        if value not in allowed:
            raise ValueError(f"{value!r} is not one of {', '.join(map(repr, allowed))}")
        return value

    return check


def optional(inner: Check) -> Check:
    def check(value: Any) -> Any:
        return None if value is None else inner(value)

    return check


def text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def ssl_context(value: Any) -> ssl.SSLContext | None:
    if value is not None and not isinstance(value, ssl.SSLContext):
        raise ValueError(f"expected an ssl.SSLContext, got {value!r}")
    return value


compression_type = choice(*(name for name in codecs.CODEC_NAMES.values()))


def parse_options(table: Mapping[str, Option], given: Mapping[str, Any]) -> SimpleNamespace:
    """Checked values for every option of `table`: the given ones, Kafka's defaults for the
    rest."""
    unknown = sorted(set(given) - set(table))
    if unknown:
        raise ConfigError(unknown[0], "unknown option")
    values = {}
    for name, option in table.items():
        if name not in given:
            values[name] = option.default
            continue
        try:
            values[name] = option.check(given[name])
        except ValueError as e:
            raise ConfigError(name, f"invalid value: {e}") from None
    return SimpleNamespace(**values)


# What every client takes besides its own options (ClusterClient's keywords).
COMMON_OPTIONS: dict[str, Option] = {
    "client_id": Option(None, optional(text)),
    "retries": Option(5, integer(0, INT32_MAX)),
    "retry_backoff_ms": Option(100, integer(0)),
    "request_timeout_ms": Option(30_000, integer(0, INT32_MAX)),
}
