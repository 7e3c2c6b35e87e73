"""Kafka's checkpoint files: the offset ones (recovery-point-offset-checkpoint,
log-start-offset-checkpoint, replication-offset-checkpoint, cleaner-offset-checkpoint) and,
through write_lines/read_lines, leader-epoch-checkpoint.

Text: a version line ("0"), an entry count, then one line per entry ("topic partition offset"
for the offset files). Written to a temp file, fsynced, renamed over the old one and the
directory fsynced, so a crash leaves either the old or the new file, never a mix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

TopicPartition = tuple[str, int]
CHECKPOINT_VERSION = 0


class CorruptCheckpointError(ValueError):
    pass


def write_lines(path: Path, entries: list[str]) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(entries)), *entries]
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        data = memoryview(("\n".join(lines) + "\n").encode())
        while data:  # a short write (a full disk) must not leave a shorter, parsable file
            written = os.write(fd, data)
            if written == 0:
                raise OSError(f"{tmp}: no byte written")
            data = data[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def read_lines(path: Path) -> list[str] | None:
    """The entry lines of a checkpoint file; None if it does not exist. Raises
    CorruptCheckpointError for an unknown version or fewer entries than its count says."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"{path}: not text: {exc}") from exc
    lines = text.splitlines()
    try:
        version, count = int(lines[0]), int(lines[1])
    except (IndexError, ValueError) as exc:
        raise CorruptCheckpointError(f"{path}: malformed checkpoint: {exc}") from exc
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(f"{path}: unknown version {lines[0]}")
    entries = lines[2 : 2 + count]
    if len(entries) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


def write_checkpoint(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    write_lines(path, [f"{t} {p} {offset}" for (t, p), offset in offsets.items()])


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """Entries of a checkpoint file; {} if it does not exist. Raises CorruptCheckpointError."""
    lines = read_lines(path)
    if lines is None:
        return {}
    entries: dict[TopicPartition, int] = {}
    try:
        for line in lines:
            topic, partition, offset = line.split(" ")
            entries[(topic, int(partition))] = int(offset)
    except ValueError as exc:
        raise CorruptCheckpointError(f"{path}: malformed checkpoint: {exc}") from exc
    if len(entries) != len(lines):
        raise CorruptCheckpointError(f"{path}: expected {len(lines)} entries, found {len(entries)}")
    return entries


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
