"""Transaction markers (KIP-98 control records): a COMMIT or ABORT that ends a producer's
transaction on one partition.

A marker is a v2 batch with the control and transactional attribute bits holding a single
record: its key is Kafka's ControlRecordType key (int16 version, int16 type), its value the
EndTransactionMarker (int16 version, int32 coordinator epoch).
"""

from __future__ import annotations

import struct

from broker.records.batch import build_batch, decode_batch
from broker.records.errors import INVALID_RECORD, InvalidRecordError

# Kafka's ControlRecordType ids (not the KIP text's numbering, which had them swapped).
ABORT = 0
COMMIT = 1

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")  # version, type
_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
) -> bytes:
    """The marker batch the partition leader writes for WriteTxnMarkers (base offset 0:
    the log stamps the real one)."""
    key = _KEY.pack(CONTROL_KEY_VERSION, COMMIT if commit else ABORT)
    value = _MARKER_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    return build_batch(
        [(key, value, [], timestamp_ms)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,  # markers are not part of the producer's sequence
        transactional=True,
        control=True,
    )


def read_control(batch_bytes: bytes | memoryview) -> tuple[int, int]:
    """(control type, coordinator epoch) of a marker batch; InvalidRecordError when the batch
    is not a COMMIT or ABORT marker."""
    header, records = decode_batch(batch_bytes)
    if not header.is_control:
        raise InvalidRecordError("not a control batch", INVALID_RECORD)
    if not records:
        raise InvalidRecordError("control batch without a record", INVALID_RECORD)
    return parse_marker(records[0].key, records[0].value)


def parse_marker(key: bytes | None, value: bytes | None) -> tuple[int, int]:
    """(control type, coordinator epoch) from a control record's key and value."""
    if key is None or len(key) < _KEY.size:
        raise InvalidRecordError("control record key shorter than 4 bytes", INVALID_RECORD)
    version, control_type = _KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"invalid control record key version {version}", INVALID_RECORD)
    if control_type not in (ABORT, COMMIT):
        raise InvalidRecordError(
            f"control record type {control_type} is not a transaction marker", INVALID_RECORD
        )
    # A newer marker version only appends fields: the first two stay readable (as in Kafka).
    if value is None or len(value) < _MARKER_VALUE.size:
        raise InvalidRecordError("end transaction marker value too short", INVALID_RECORD)
    marker_version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    if marker_version < 0:
        raise InvalidRecordError(
            f"invalid end transaction marker version {marker_version}", INVALID_RECORD
        )
    return control_type, coordinator_epoch
