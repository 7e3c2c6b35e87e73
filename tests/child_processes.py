"""Finding a process's children by their command line, to kill one of them as a crash would."""

from __future__ import annotations

from pathlib import Path


def child_pid(parent: int, *argv: str) -> int:
    """The pid of parent's child whose command line holds every one of argv."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The command name in parentheses may hold spaces; the parent's pid follows it.
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
            words = (stat.parent / "cmdline").read_bytes().decode().split("\0")
        except (FileNotFoundError, ProcessLookupError):
            continue
        if ppid == parent and all(word in words for word in argv):
            return int(stat.parent.name)
    raise LookupError(f"no child {argv} of {parent}")
