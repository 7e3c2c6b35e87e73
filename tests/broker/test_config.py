"""Broker properties: Kafka's names and defaults, fail-fast validation."""

from __future__ import annotations

import pytest

from broker.config import (
    BrokerConfig,
    ConfigError,
    parse_overrides,
    read_properties,
    validate_topic_configs,
)


def test_defaults_are_kafkas():
    config = BrokerConfig()
    assert config["num.partitions"] == 1
    assert config["message.max.bytes"] == 1048588
    assert config["log.segment.bytes"] == 1073741824
    assert config["log.retention.ms"] == 7 * 24 * 3600 * 1000
    assert config["log.retention.bytes"] == -1
    assert config["log.index.interval.bytes"] == 4096
    assert config["socket.request.max.bytes"] == 104857600
    assert config["auto.create.topics.enable"] is True
    assert config["log.message.timestamp.type"] == "CreateTime"


def test_hours_and_minutes_spellings_yield_to_milliseconds():
    assert BrokerConfig({"log.retention.hours": "2"})["log.retention.ms"] == 7_200_000
    both = BrokerConfig({"log.retention.hours": "2", "log.retention.ms": "5"})
    assert both["log.retention.ms"] == 5
    assert BrokerConfig({"log.roll.hours": "1"})["log.roll.ms"] == 3_600_000


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"no.such.property": "1"}, "Unknown configuration 'no.such.property'"),
        ({"num.partitions": "zero"}, "num.partitions"),
        ({"num.partitions": "0"}, "at least 1"),
        ({"log.message.timestamp.type": "Whenever"}, "CreateTime, LogAppendTime"),
        ({"listeners": "PLAINTEXT//nowhere"}, "NAME://host:port"),
        ({"auto.create.topics.enable": "yes"}, "boolean"),
        ({"group.coordinator.rebalance.protocols": "consumer"}, "Disabling the 'classic'"),
        ({"group.consumer.assignors": "uniform,sticky"}, "uniform, range"),
    ],
)
def test_invalid_properties_fail_with_a_message_naming_them(props, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(props)


def test_properties_file_syntax(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text(
        "# comment\n! another\n\nnode.id=3\nlog.dirs = /a, \\\n  /b\nnum.partitions: 4\n"
    )
    props = read_properties(path)
    assert props == {"node.id": "3", "log.dirs": "/a, /b", "num.partitions": "4"}
    config = BrokerConfig(props)
    assert config.node_id == 3 and [str(d) for d in config.log_dirs] == ["/a", "/b"]


def test_overrides_need_key_value():
    assert parse_overrides(["a=b=c"]) == {"a": "b=c"}
    with pytest.raises(ConfigError):
        parse_overrides(["novalue"])


def test_topic_configs_reject_unknown_and_invalid_values():
    assert validate_topic_configs({"retention.ms": "1000"}) == {"retention.ms": 1000}
    with pytest.raises(ConfigError, match="Unknown topic config"):
        validate_topic_configs({"retention.millis": "1"})
    with pytest.raises(ConfigError, match="segment.bytes"):
        validate_topic_configs({"segment.bytes": "1"})
