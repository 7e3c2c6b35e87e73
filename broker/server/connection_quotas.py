"""Connection counts per client address and broker-wide, against Kafka's limits.

`max.connections.per.ip` (with `max.connections.per.ip.overrides`) and `max.connections` are
read from the config on every check, so values changed at run time (they are dynamic broker
configs, as in Kafka) apply to the next connection; `listener.name.<listener>.max.connections`
caps one listener (static here). Kafka's acceptor stops accepting while the broker or the
listener is at its `max.connections` and resumes when a connection closes; asyncio accepts on
its own, so here a connection over that limit is closed as soon as it is accepted, like one
over the per-address limit. Sans-io: the caller passes the peer address and acts on the answer.
"""

from __future__ import annotations

import ipaddress
import socket
from collections import Counter
from collections.abc import Mapping

from broker.addresses import normalise_address
from broker.config import connection_overrides

PER_IP = "max.connections.per.ip"
BROKER_WIDE = "max.connections"
PER_LISTENER = "listener.max.connections"


def parse_overrides(entries: list[str]) -> dict[str, int]:
    """`host:count` items as {normalised address: count}; raises ValueError on a bad item."""
    overrides: dict[str, int] = {}
    for entry in entries:
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host:
            raise ValueError(f"{entry!r} is not host:count")
        limit = int(count)
        if limit < 0:
            raise ValueError(f"{entry!r}: the count must be at least 0")
        overrides[_address(host)] = limit
    return overrides


def _address(host: str) -> str:
    try:
        return normalise_address(str(ipaddress.ip_address(host)))
    except ValueError:
        # Kafka resolves host names in the overrides once, when the config is read.
        try:
            return socket.gethostbyname(host)
        except OSError as e:
            raise ValueError(f"cannot resolve {host!r}: {e}") from None


class ConnectionQuotas:
    def __init__(self, config: Mapping[str, object]) -> None:
        self._config = config
        self._per_ip: Counter[str] = Counter()
        self._per_listener: Counter[str] = Counter()
        self.total = 0
        self._overrides_raw: object = None
        self._overrides: dict[str, int] = {}

    def count(self, address: str) -> int:
        return self._per_ip[address]

    def accept(self, address: str, listener: str = "") -> str | None:
        """Count a new connection from `address` on `listener`, or return the name of the limit
        it exceeds (then nothing is counted)."""
        address = normalise_address(address)
        per_ip_limit = self._overrides_now().get(address, self._config[PER_IP])
        if self._per_ip[address] >= per_ip_limit:  # type: ignore[operator]
            return PER_IP
        if self.total >= self._config[BROKER_WIDE]:  # type: ignore[operator]
            return BROKER_WIDE
        listener_limit = self._listener_limit(listener)
        if listener_limit is not None and self._per_listener[listener] >= listener_limit:
            return PER_LISTENER
        self._per_ip[address] += 1
        self._per_listener[listener] += 1
        self.total += 1
        return None

    def release(self, address: str, listener: str = "") -> None:
        address = normalise_address(address)
        for counts, key in ((self._per_ip, address), (self._per_listener, listener)):
            counts[key] -= 1
            if counts[key] <= 0:
                del counts[key]
        self.total -= 1

    def _listener_limit(self, listener: str) -> int | None:
        value = getattr(self._config, "listener_value", None)
        if value is None or not listener:
            return None
        return value(listener, BROKER_WIDE, prefixed_only=True)

    def _overrides_now(self) -> dict[str, int]:
        raw = self._config["max.connections.per.ip.overrides"]
        if raw != self._overrides_raw:
            self._overrides = parse_overrides(connection_overrides(raw))
            self._overrides_raw = raw
        return self._overrides
