"""Transaction markers: the control batch Kafka's MemoryRecords.withEndTransactionMarker writes."""

from __future__ import annotations

import struct

import pytest

from broker.records.batch import build_batch, crc_matches, decode_batch, read_header
from broker.records.control import ABORT, COMMIT, build_control_batch, read_control
from broker.records.errors import InvalidRecordError


@pytest.mark.parametrize("commit", [True, False])
def test_marker_batch_layout(commit):
    data = build_control_batch(42, 3, commit, coordinator_epoch=17, timestamp_ms=1234)
    header = read_header(data)
    assert header.magic == 2 and header.size == len(data) and crc_matches(data, 0, header)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, -1)
    assert (header.records_count, header.last_offset_delta, header.compression) == (1, 0, 0)
    assert header.max_timestamp == 1234
    _, records = decode_batch(data)
    (record,) = records
    # Key: ControlRecordType (version 0, type); value: EndTransactionMarker (version 0, epoch).
    assert record.key == struct.pack(">hh", 0, 1 if commit else 0)
    assert record.value == struct.pack(">hi", 0, 17)
    assert record.headers == []
    assert read_control(data) == (COMMIT if commit else ABORT, 17)


def test_kafka_control_type_ids():
    assert (ABORT, COMMIT) == (0, 1)


def test_newer_marker_versions_stay_readable():
    data = build_batch(
        [(struct.pack(">hh", 1, COMMIT), struct.pack(">hiq", 1, 9, 77), [], 5)],
        producer_id=1,
        producer_epoch=0,
        transactional=True,
        control=True,
    )
    assert read_control(data) == (COMMIT, 9)


@pytest.mark.parametrize(
    "key, value, control",
    [
        (struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 1), False),  # a data batch
        (struct.pack(">h", 0), struct.pack(">hi", 0, 1), True),  # key too short
        (None, struct.pack(">hi", 0, 1), True),
        (struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 1), True),  # LEADER_CHANGE: no marker
        (struct.pack(">hh", -1, 0), struct.pack(">hi", 0, 1), True),
        (struct.pack(">hh", 0, 0), struct.pack(">h", 0), True),  # value too short
        (struct.pack(">hh", 0, 0), None, True),
    ],
)
def test_non_markers_are_rejected(key, value, control):
    data = build_batch(
        [(key, value, [], 5)], producer_id=1, producer_epoch=0, transactional=True, control=control
    )
    with pytest.raises(InvalidRecordError):
        read_control(data)
