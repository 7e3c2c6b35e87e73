"""What both group protocols' members share: the background task that keeps the membership,
the poll timer (max_poll_interval_ms), fatal errors kept for the next poll, and the fencing
identity that commits carry.

The protocols differ in `_step` (one round of joining or heartbeating) and `_leave`; see
classic_coordinator.py and consumer_coordinator.py.
"""

from __future__ import annotations

import asyncio
import logging
import time

from kio.schema.errors import ErrorCode

from broker.client.cluster import GROUP_KEY, RETRIABLE
from broker.client.connection import ConnectionClosed
from broker.client.consumer.rebalance import Partitions, RebalanceInvoker
from broker.client.consumer.subscription_state import SubscriptionState
from broker.client.errors import GroupMembershipError, KafkaAdminError
from broker.client.models import ConsumerGroupMetadata
from broker.client.routing import RoutingClient

log = logging.getLogger(__name__)


class GroupMember:
    def __init__(
        self,
        client: RoutingClient,
        group_id: str,
        subscriptions: SubscriptionState,
        rebalance: RebalanceInvoker,
        *,
        group_instance_id: str | None,
        max_poll_interval_ms: int,
        metadata_max_age_ms: int,
        client_rack: str | None,
    ) -> None:
        self.client = client
        self.group_id = group_id
        self.subscriptions = subscriptions
        self.rebalance = rebalance
        self.group_instance_id = group_instance_id
        self.max_poll_interval_ms = max_poll_interval_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.client_rack = client_rack or None
        self.member_id = ""
        self.owned: Partitions = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._error: BaseException | None = None
        self._last_poll = time.monotonic()
        self._poll_expired = False
        self._cluster_topics: set[str] = set()
        self._topics_read_at = float("-inf")

    # -- what the consumer sees -------------------------------------------------------------

    @property
    def generation(self) -> int:
        """The generation id (classic) or member epoch (consumer) commits are fenced with."""
        raise NotImplementedError

    def group_metadata(self) -> ConsumerGroupMetadata:
        return ConsumerGroupMetadata(
            self.group_id, self.generation, self.member_id, self.group_instance_id
        )

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"group {self.group_id}")

    def wake(self) -> None:
        self._wake.set()

    def poll(self) -> None:
        """The application polls: the poll timer restarts; an error the membership met is
        raised here, once; a member that left for want of polls joins again."""
        self._last_poll = time.monotonic()
        if self._poll_expired:
            self._poll_expired = False
            self.wake()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    async def close(self) -> None:
        """Stop the membership; a member that holds its place leaves the group (revoking what
        it owns first, so its listener may commit)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        try:
            await self.rebalance.revoke(self.owned)
        finally:
            self.owned = set()
            await self._leave_quietly()

    # -- the background task ----------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            delay: float | None
            try:
                if self._poll_timer_expired():
                    await self._leave_for_poll_timeout()
                    delay = None
                elif self._poll_expired:
                    delay = None  # wait for the next poll
                elif not self.subscriptions.has_group_subscription:
                    if self.owned or self.member_id:
                        await self.rebalance.revoke(self.owned)
                        self.owned = set()
                        await self._leave_quietly()
                    delay = None
                else:
                    delay = await self._step()
            except asyncio.CancelledError:
                raise
            except (ConnectionClosed, OSError) as e:
                log.debug("group %s: %r, retrying", self.group_id, e)
                delay = self.client.retry_backoff_ms / 1000
            except KafkaAdminError as e:
                if e.code not in RETRIABLE:
                    await self._fail(e)
                    delay = None
                else:
                    delay = self.client.retry_backoff_ms / 1000
            except Exception as e:  # a listener's: given to the application, the group goes on
                self._error = e
                delay = 0
            await self._sleep(delay)

    async def _sleep(self, seconds: float | None) -> None:
        if seconds is None:
            await self._wake.wait()
            return
        try:
            await asyncio.wait_for(self._wake.wait(), max(seconds, 0))
        except TimeoutError:
            pass

    async def _fail(self, error: KafkaAdminError) -> None:
        """A fatal answer: the partitions are lost, the error goes to the next poll."""
        self._error = GroupMembershipError(error.code, error.name, error.message, self.group_id)
        lost, self.owned = self.owned, set()
        await self.rebalance.lose(lost)
        self._reset_membership()
        self._poll_expired = True  # wait for the application before trying again

    def _poll_timer_expired(self) -> bool:
        elapsed_ms = (time.monotonic() - self._last_poll) * 1000
        return not self._poll_expired and elapsed_ms > self.max_poll_interval_ms

    async def _leave_for_poll_timeout(self) -> None:
        """As Kafka's consumer: a member not polled for max_poll_interval_ms leaves so that its
        partitions go to members that make progress; it joins again on its next poll."""
        log.warning(
            "group %s: no poll within max.poll.interval.ms (%d ms), leaving the group",
            self.group_id,
            self.max_poll_interval_ms,
        )
        self._poll_expired = True
        lost, self.owned = self.owned, set()
        await self._leave_quietly()
        await self.rebalance.lose(lost)

    async def _leave_quietly(self) -> None:
        if not self.member_id:
            return
        try:
            await self._leave()
        except (KafkaAdminError, ConnectionClosed, OSError) as e:
            log.debug("group %s: leaving failed: %r", self.group_id, e)
        self._reset_membership()

    async def cluster_topics(self) -> set[str]:
        """The cluster's topic names, read again after metadata_max_age_ms, for patterns."""
        if time.monotonic() - self._topics_read_at > self.metadata_max_age_ms / 1000:
            response = await self.client.metadata(None)
            self._cluster_topics = {
                t.name
                for t in response.topics
                if t.error_code == ErrorCode.none and not t.is_internal
            }
            self._topics_read_at = time.monotonic()
        return self._cluster_topics

    def topics_may_have_changed(self) -> None:
        self._topics_read_at = float("-inf")

    async def coordinator(self):
        return await self.client.coordinator(GROUP_KEY, self.group_id)

    # -- per protocol -----------------------------------------------------------------------

    async def _step(self) -> float | None:
        """One round: join, or heartbeat. Answers how long to wait before the next one."""
        raise NotImplementedError

    async def _leave(self) -> None:
        raise NotImplementedError

    def _reset_membership(self) -> None:
        raise NotImplementedError
