"""What a broker process (with any processes it started) costs the machine, from /proc."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CpuTimes:
    user_s: float
    system_s: float

    @property
    def total_s(self) -> float:
        return self.user_s + self.system_s

    def __sub__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(self.user_s - other.user_s, self.system_s - other.system_s)


def tree(*pids: int) -> list[int]:
    """`pids` and their descendants, from one scan of /proc: a broker that serves connections
    from several processes is measured whole."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], list(pids)
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, ()))
    return found


def cpu_times(pids: list[int]) -> CpuTimes:
    """User and system CPU time so far of `pids` and their descendants."""
    ticks = os.sysconf("SC_CLK_TCK")
    user = system = 0
    for member in tree(*pids):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        user += int(fields[11])
        system += int(fields[12])
    return CpuTimes(user / ticks, system / ticks)


def pss_kb(pid: int) -> int:
    """Proportional set size of `pid` and its descendants."""
    total = 0
    for member in tree(pid):
        try:
            rollup = Path(f"/proc/{member}/smaps_rollup").read_text()
        except OSError:
            continue
        total += next(
            int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")
        )
    return total
