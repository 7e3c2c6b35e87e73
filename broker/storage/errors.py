"""Storage errors carrying the Kafka error code to answer with."""

from __future__ import annotations

OFFSET_OUT_OF_RANGE = 1


class OffsetOutOfRangeError(Exception):
    """A requested offset lies outside [log_start_offset, log_end_offset] (or the HW bound)."""

    error_code = OFFSET_OUT_OF_RANGE
