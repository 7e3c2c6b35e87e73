"""Rebalance listeners: what the application is told when partitions come and go.

A listener is any object with some of `on_partitions_revoked`, `on_partitions_assigned` and
`on_partitions_lost`, each taking a set of TopicPartitions, sync or async. As in Kafka:
- revoked: the member gives partitions up in an orderly way (commit what was processed);
- lost: they were already taken away (fenced, session expired): committing would fail;
  without `on_partitions_lost` the listener's `on_partitions_revoked` is called;
- assigned: new partitions, before any record of them is handed out (seek here if wanted).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from broker.client.consumer.subscription_state import SubscriptionState
from broker.client.models import TopicPartition

Partitions = set[TopicPartition]


class ConsumerRebalanceListener:
    """A base to subclass; every method may also be `async def`."""

    def on_partitions_revoked(self, revoked: Partitions) -> Any:
        pass

    def on_partitions_assigned(self, assigned: Partitions) -> Any:
        pass

    def on_partitions_lost(self, lost: Partitions) -> Any:
        return self.on_partitions_revoked(lost)


async def _call(listener: Any, name: str, partitions: Partitions) -> None:
    method = getattr(listener, name, None)
    if method is None and name == "on_partitions_lost":
        method = getattr(listener, "on_partitions_revoked", None)
    if method is None:
        return
    result = method(set(partitions))
    if inspect.isawaitable(result):
        await result


class RebalanceInvoker:
    """What a group coordinator does on an assignment change: the subscription state first
    (assigned partitions exist before the listener may seek them; revoked ones stay until the
    listener has committed), the consumer's own hooks (commit before revoke, committed offsets
    after assign), then the application's listener."""

    def __init__(
        self,
        subscriptions: SubscriptionState,
        *,
        before_revoke: Callable[[Partitions], Awaitable[None]],
        after_assign: Callable[[Partitions], Awaitable[None]],
        after_remove: Callable[[Partitions], Awaitable[None]],
    ) -> None:
        self.subscriptions = subscriptions
        self.listener: Any = None
        self._before_revoke = before_revoke
        self._after_assign = after_assign
        self._after_remove = after_remove

    async def revoke(self, partitions: Partitions) -> None:
        if not partitions:
            return
        try:
            await self._before_revoke(partitions)
            await _call(self.listener, "on_partitions_revoked", partitions)
        finally:
            self.subscriptions.remove_partitions(partitions)
            await self._after_remove(partitions)

    async def assign(self, partitions: Partitions) -> None:
        self.subscriptions.add_partitions(partitions)
        await _call(self.listener, "on_partitions_assigned", partitions)
        await self._after_assign(partitions)

    async def lose(self, partitions: Partitions) -> None:
        if not partitions:
            return
        self.subscriptions.remove_partitions(partitions)
        await self._after_remove(partitions)
        await _call(self.listener, "on_partitions_lost", partitions)
