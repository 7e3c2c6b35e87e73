"""The contract between coordinator state machines and the broker that runs them.

Kafka's group coordinator (KIP-848's rewrite) works like this, and so does Fjord's:

- An operation (a request, or a timer firing) reads the state and returns a `Result`: the
  records that describe the change and the response to send. It does not mutate persistent
  state itself.
- The runtime appends the records to the coordinator's partition of its internal topic
  (`__consumer_offsets`) and then *replays* each one into the state machine. Start-up replays
  the same records from the log, so the live path and recovery can never disagree.
- The response is sent once the records are appended (on a single node, appended is committed).

Everything here is sans-io: no sockets, no event loop. Time comes in as `now_ms` arguments and
leaves as timer deadlines; the server turns those into loop timers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a coordinator's log: a typed key and a typed value, None for a tombstone.
    Key and value types live in `broker.coordinator.records`."""

    key: Any
    value: Any | None


@dataclass(slots=True)
class Result(Generic[T]):
    records: list[Record] = field(default_factory=list)
    response: T | None = None


class Deferred(Generic[T]):
    """A response the coordinator produces later (a JoinGroup answered when the rebalance
    completes). The server waits on it; the state machine resolves it."""

    __slots__ = ("_callbacks", "done", "value")

    def __init__(self) -> None:
        self._callbacks: list[Callable[[T], None]] = []
        self.done = False
        self.value: T | None = None

    def resolve(self, value: T) -> None:
        if self.done:
            return
        self.done, self.value = True, value
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(value)

    def add_callback(self, callback: Callable[[T], None]) -> None:
        if self.done:
            callback(self.value)  # type: ignore[arg-type]
        else:
            self._callbacks.append(callback)


TimerTask = Callable[[int], list[Record]]


class TimerKey(NamedTuple):
    """A timer's name: what it is for, and the group and member it belongs to, so that the
    timers of a group can be cancelled when the coordinator lets the group go."""

    kind: str
    group_id: str = ""
    member_id: str = ""


class Timer:
    """Deadlines keyed by name: scheduling a key again replaces its deadline (a heartbeat
    pushes its session timeout back). `expire(now_ms)` runs the due tasks and returns the
    records they produced; the server calls it when `next_deadline()` comes."""

    def __init__(self) -> None:
        self._tasks: dict[TimerKey, tuple[int, TimerTask]] = {}
        self.on_change: Callable[[], None] | None = None  # the server re-arms its loop timer

    def schedule(self, key: TimerKey, deadline_ms: int, task: TimerTask) -> None:
        self._tasks[key] = (deadline_ms, task)
        if self.on_change is not None:
            self.on_change()

    def cancel(self, key: TimerKey) -> None:
        self._tasks.pop(key, None)

    def cancel_groups(self, group_ids: Collection[str]) -> None:
        for key in [k for k in self._tasks if k.group_id in group_ids]:
            del self._tasks[key]

    def is_scheduled(self, key: TimerKey) -> bool:
        return key in self._tasks

    def deadline(self, key: TimerKey) -> int | None:
        entry = self._tasks.get(key)
        return entry[0] if entry else None

    def next_deadline(self) -> int | None:
        return min((d for d, _ in self._tasks.values()), default=None)

    def expire(self, now_ms: int) -> list[tuple[TimerKey, TimerTask]]:
        """Remove and return the due tasks, earliest first; the caller runs each one through
        the runtime (so its records are appended and replayed like any operation's)."""
        due = sorted((d, k) for k, (d, _) in self._tasks.items() if d <= now_ms)
        return [(k, self._tasks.pop(k)[1]) for _, k in due]
