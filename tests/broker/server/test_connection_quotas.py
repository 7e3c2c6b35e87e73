"""ConnectionQuotas without sockets: per-address and broker-wide counts against the config."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.server.connection_quotas import ConnectionQuotas, parse_overrides


def quotas(**props: str) -> tuple[ConnectionQuotas, BrokerConfig]:
    config = BrokerConfig({k.replace("_", "."): v for k, v in props.items()})
    return ConnectionQuotas(config), config


def test_defaults_are_kafkas():
    config = BrokerConfig()
    assert config["max.connections"] == config["max.connections.per.ip"] == 2**31 - 1
    assert config["connections.max.idle.ms"] == 600000


def test_per_ip_limit_is_checked_before_the_broker_wide_one():
    q, _ = quotas(max_connections="2", max_connections_per_ip="1")
    assert q.accept("10.0.0.1") is None
    assert q.accept("10.0.0.1") == "max.connections.per.ip"
    assert q.accept("10.0.0.2") is None
    assert q.accept("10.0.0.3") == "max.connections"
    q.release("10.0.0.1")
    assert q.accept("10.0.0.3") is None
    assert q.total == 2


def test_overrides_and_ipv4_mapped_addresses():
    q, _ = quotas(max_connections_per_ip="0", max_connections_per_ip_overrides="127.0.0.1:2")
    assert q.accept("::ffff:127.0.0.1") is None
    assert q.accept("127.0.0.1") is None
    assert q.accept("127.0.0.1") == "max.connections.per.ip"
    assert q.accept("10.1.1.1") == "max.connections.per.ip"
    assert q.count("127.0.0.1") == 2


def test_dynamic_changes_apply_to_the_next_connection():
    q, config = quotas()
    assert q.accept("10.0.0.1") is None
    config.set_dynamic({"max.connections.per.ip": 1})
    assert q.accept("10.0.0.1") == "max.connections.per.ip"
    config.set_dynamic({"max.connections.per.ip.overrides": "10.0.0.1:5"})
    assert q.accept("10.0.0.1") is None


def test_override_syntax():
    assert parse_overrides(["localhost:3", "[::1]:4"]) == {"127.0.0.1": 3, "::1": 4}
    for bad in ("10.0.0.1", "10.0.0.1:x", ":3", "10.0.0.1:-1"):
        with pytest.raises(ValueError):
            parse_overrides([bad])
    with pytest.raises(ConfigError, match="max.connections.per.ip.overrides"):
        BrokerConfig({"max.connections.per.ip.overrides": "10.0.0.1:many"})


def test_listener_limit_counts_only_that_listener():
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "listener.name.internal.max.connections": "1",
        }
    )
    q = ConnectionQuotas(config)
    assert q.accept("10.0.0.1", "INTERNAL") is None
    assert q.accept("10.0.0.2", "INTERNAL") == "listener.max.connections"
    assert q.accept("10.0.0.2", "PLAINTEXT") is None
    q.release("10.0.0.1", "INTERNAL")
    assert q.accept("10.0.0.2", "INTERNAL") is None
