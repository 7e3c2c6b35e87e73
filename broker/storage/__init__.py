"""Kafka's on-disk log: segments with offset and time indexes, logs, the log manager."""

from broker.storage.config import LogConfig
from broker.storage.errors import OffsetOutOfRangeError
from broker.storage.log import AppendResult, FetchData, Log
from broker.storage.manager import LogManager

__all__ = ["AppendResult", "FetchData", "Log", "LogConfig", "LogManager", "OffsetOutOfRangeError"]
