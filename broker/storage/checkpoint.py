"""Kafka's offset checkpoint files (recovery-point-offset-checkpoint, log-start-offset-checkpoint).

Text: a version line ("0"), an entry count, then one "topic partition offset" line per entry.
Written to a temp file, fsynced, renamed over the old one and the directory fsynced, so a
crash leaves either the old or the new file, never a mix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

TopicPartition = tuple[str, int]
CHECKPOINT_VERSION = 0


class CorruptCheckpointError(ValueError):
    pass


def write_checkpoint(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in offsets.items()]
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, ("\n".join(lines) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """Entries of a checkpoint file; {} if it does not exist. Raises CorruptCheckpointError."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    lines = text.splitlines()
    try:
        if int(lines[0]) != CHECKPOINT_VERSION:
            raise CorruptCheckpointError(f"{path}: unknown version {lines[0]}")
        count = int(lines[1])
        entries: dict[TopicPartition, int] = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split(" ")
            entries[(topic, int(partition))] = int(offset)
    except (IndexError, ValueError) as exc:
        if isinstance(exc, CorruptCheckpointError):
            raise
        raise CorruptCheckpointError(f"{path}: malformed checkpoint: {exc}") from exc
    if len(entries) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
