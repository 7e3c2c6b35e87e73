"""Truncation survives kill -9 anywhere. A child process truncates a follower's log through the
LogManager and appends the leader's records after the cut; it kills itself with SIGKILL just
before its N-th change to the file system, for every N. What it leaves must load as a prefix of
the old log or of the new one, no shorter than the cut, whose indexes, transactions, producer
state and leader epochs match its batches."""

from __future__ import annotations

import builtins
import os
import shutil
import signal
import traceback
from collections.abc import Callable
from pathlib import Path

from test_log_recovery import values
from test_log_transactions import Producer
from test_log_truncation import T0, append, append_at, assert_matches_rebuild

from broker.storage import LogConfig, LogManager

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100, file_delete_delay_ms=0)
TP = ("t", 0)
_CHANGES = ("rename", "replace", "unlink", "ftruncate", "truncate", "write", "writev", "fsync")


def die_before_change(n: int) -> Callable[[], int]:
    """From now on, count this process's changes to the file system and SIGKILL it before
    the n-th (counting from 0; never for -1). Returns the count so far."""
    count = [0]

    def step() -> None:
        if count[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        count[0] += 1

    def counted(call):
        def wrapper(*args, **kwargs):
            step()
            return call(*args, **kwargs)

        return wrapper

    for name in _CHANGES:
        setattr(os, name, counted(getattr(os, name)))
    os_open, builtin_open = os.open, builtins.open

    def creating_open(path, flags, *args, **kwargs):
        if flags & (os.O_CREAT | os.O_TRUNC):
            step()
        return os_open(path, flags, *args, **kwargs)

    def writing_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            step()
        return builtin_open(file, mode, *args, **kwargs)

    os.open, builtins.open = creating_open, writing_open
    return lambda: count[0]


def load(directory: Path) -> LogManager:
    manager = LogManager([directory], high_watermark_follows_appends=False)
    manager.load(lambda topic: CONFIG, now_ms=T0)
    return manager


def run_killed(directory: Path, n: int, operation: Callable[[LogManager], None]) -> int:
    """Run `operation` on the log dir in a child killed before its n-th change; returns the
    child's wait status. Its count of changes is written to `changes` in the dir."""
    pid = os.fork()
    if pid == 0:
        try:
            manager = load(directory)
            changes = die_before_change(n)
            operation(manager)
            (directory / "changes").write_text(str(changes()))
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    return os.waitpid(pid, 0)[1]


def follower_dir(source: Path) -> list:
    """A follower's log dir, cleanly shut down: epochs 0 and 1, producer 1's transaction
    begun at 20 and aborted at 30, producer 2's begun at 31, high watermark 45; returns its
    records."""
    manager = load(source)
    log = manager.create(*TP, CONFIG)
    for i in range(20):
        append(log, b"old%d" % i, ts=T0 + i)
    Producer(log, 1).send(2)  # 20-21
    for i in range(22, 30):
        append(log, b"old%d" % i, ts=T0 + i, epoch=1)
    log.append_marker(1, 0, False, 0, now_ms=T0, leader_epoch=1)  # 30
    Producer(log, 2).send(1)  # 31
    for i in range(32, 50):
        append(log, b"old%d" % i, ts=T0 + i, epoch=1)
    log.maybe_increment_high_watermark(45)
    old = values(log)
    manager.close()
    return old


def crash_everywhere(tmp_path: Path, operation, check) -> None:
    """`operation` killed before each of its changes in turn; `check(log, old, new)` judges
    the log each crash leaves, `new` being the records it leaves when it completes."""
    source = tmp_path / "source"
    old = follower_dir(source)
    completed = tmp_path / "completed"
    shutil.copytree(source, completed)
    assert run_killed(completed, -1, operation) == 0
    total = int((completed / "changes").read_text())
    manager = load(completed)
    new = values(manager.get(*TP))
    manager.close()
    assert total > 20 and new != old
    for n in range(total):
        directory = tmp_path / f"killed-{n}"
        shutil.copytree(source, directory)
        status = run_killed(directory, n, operation)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (n, status)
        manager = load(directory)
        log = manager.get(*TP)
        check(log, old, new)
        assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
        assert_matches_rebuild(log, tmp_path / "rebuilt")
        end = log.log_end_offset
        assert append(log, b"after", ts=T0, epoch=3).base_offset == end
        log.delete()  # skips the fsyncs of a close: the copy is disposable
        shutil.rmtree(directory)


def refetch(manager: LogManager, start: int, count: int, epoch: int) -> None:
    """The leader's records from `start` on, then the broker's periodic flush and checkpoint."""
    log = manager.get(*TP)
    for i in range(start, start + count):
        append_at(log, i, b"new%d" % i, ts=T0 + i, epoch=epoch)
    log.flush()
    manager.checkpoint()


CUT = 25


def truncate_and_refetch(manager: LogManager) -> None:
    assert manager.truncate_to(*TP, CUT)
    # The leader committed the transaction this follower had seen aborted.
    manager.get(*TP).append_marker(1, 0, True, 0, now_ms=T0, leader_epoch=2)
    refetch(manager, CUT + 1, 19, epoch=2)


def test_kill_9_anywhere_in_truncate_to(tmp_path):
    def check(log, old, new):
        got = values(log)
        kept = [r for r in old if r[0] < CUT]
        assert len(got) >= len(kept) and log.log_end_offset >= CUT
        assert got in (old[: len(got)], new[: len(got)])

    crash_everywhere(tmp_path, truncate_and_refetch, check)


START = 100


def start_over_and_refetch(manager: LogManager) -> None:
    manager.truncate_fully_and_start_at(*TP, START)
    refetch(manager, START, 12, epoch=4)


def test_kill_9_anywhere_in_truncate_fully_and_start_at(tmp_path):
    def check(log, old, new):
        got = values(log)
        if got == old[: len(got)] and log.log_start_offset < START:
            return  # the old log, or what of it came before the segments still there
        assert log.log_start_offset == START and got == new[: len(got)]

    crash_everywhere(tmp_path, start_over_and_refetch, check)
