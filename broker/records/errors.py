"""Errors raised for bad record data, carrying the Kafka error code to answer with."""

from __future__ import annotations

CORRUPT_MESSAGE = 2
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87


class InvalidRecordError(ValueError):
    """A batch or record the broker must reject; `error_code` is Kafka's response code."""

    def __init__(self, message: str, error_code: int = INVALID_RECORD) -> None:
        super().__init__(message)
        self.error_code = error_code
