"""The classic group protocol's member (Kafka's AbstractCoordinator + ConsumerCoordinator).

JoinGroup (with MEMBER_ID_REQUIRED's second round), the leader's client-side assignment (see
assignors.py), SyncGroup, then Heartbeat every heartbeat_interval_ms until the coordinator
answers REBALANCE_IN_PROGRESS. Two rebalance protocols, chosen as Kafka does: cooperative when
every configured assignor supports it, eager otherwise.

- eager: every owned partition is revoked before joining; the new assignment is all assigned.
- cooperative: the member keeps consuming while it rejoins, sends what it owns; only what
  the new assignment takes away is revoked, and then the member rejoins at once so that the
  revoked partitions can be given to their new owner in the next generation.

Static membership (group_instance_id): the member keeps its place across restarts within the
session timeout and does not send LeaveGroup when it closes, as Kafka's consumer.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.client.consumer.assignors import (
    ASSIGNORS,
    COOPERATIVE,
    PROTOCOL_TYPE,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    subscription_version,
)
from broker.client.consumer.group_member import GroupMember
from broker.client.errors import check
from broker.client.models import TopicPartition

log = logging.getLogger(__name__)

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
NO_GENERATION = -1
# Answers after which the member joins again (with a fresh member id for UNKNOWN_MEMBER_ID).
REJOIN = frozenset(
    {
        ErrorCode.rebalance_in_progress,
        ErrorCode.illegal_generation,
        ErrorCode.unknown_member_id,
    }
)


class ClassicCoordinator(GroupMember):
    def __init__(
        self,
        *args: Any,
        assignors: list[str],
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.assignors = assignors
        self.cooperative = all(a in COOPERATIVE for a in assignors)
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.generation_id = NO_GENERATION
        self.protocol: str | None = None
        self._joined_topics: set[str] | None = None  # None: (re)join needed

    @property
    def generation(self) -> int:
        return self.generation_id

    def rejoin(self) -> None:
        self._joined_topics = None
        self.wake()

    async def _step(self) -> float | None:
        topics = self.subscriptions.subscribed_topics(
            await self.cluster_topics() if self.subscriptions.pattern is not None else ()
        )
        if self._joined_topics != topics:
            await self._join(topics)
            return 0 if self._joined_topics is None else self.heartbeat_interval_ms / 1000
        await self._heartbeat()
        return self.heartbeat_interval_ms / 1000

    # -- joining ----------------------------------------------------------------------------

    async def _join(self, topics: set[str]) -> None:
        if not self.cooperative and self.owned:
            revoked, self.owned = self.owned, set()
            await self.rebalance.revoke(revoked)
        metadata = encode_subscription(
            Subscription(
                tuple(sorted(topics)),
                tuple(sorted(self.owned)) if self.cooperative else (),
                self.generation_id,
                self.client_rack,
            )
        )
        joined = await self._send_join(metadata)
        if joined is None:
            return  # join again
        assignments = None
        if joined.leader == self.member_id and not getattr(joined, "skip_assignment", False):
            assignments = await self._assign(joined)
        assigned = await self._send_sync(assignments or {})
        if assigned is None:
            return
        self._joined_topics = topics
        await self._apply(set(assigned))

    async def _send_join(self, metadata: bytes) -> Any:
        session = await self.coordinator()
        response = await session.send(
            session.request(
                JOIN_GROUP,
                "JoinGroupRequest",
                group_id=self.group_id,
                session_timeout=timedelta(milliseconds=self.session_timeout_ms),
                rebalance_timeout=timedelta(milliseconds=self.max_poll_interval_ms),
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=tuple(
                    session.request(
                        JOIN_GROUP, "JoinGroupRequestProtocol", name=name, metadata=metadata
                    )
                    for name in self.assignors
                ),
                reason=None,
            )
        )
        code = response.error_code
        if code == ErrorCode.member_id_required:
            self.member_id = response.member_id
            return None
        if code == ErrorCode.unknown_member_id:
            self.member_id = ""
            return None
        if code == ErrorCode.rebalance_in_progress:
            return None
        check(code, None, self.group_id)
        self.member_id = response.member_id
        self.generation_id = response.generation_id
        self.protocol = response.protocol_name
        return response

    async def _assign(self, joined: Any) -> dict[str, bytes]:
        """The leader's work: every member's assignment from their subscriptions."""
        members = {m.member_id: decode_subscription(m.metadata) for m in joined.members}
        versions = {m.member_id: subscription_version(m.metadata) for m in joined.members}
        wanted = sorted({t for s in members.values() for t in s.topics})
        counts: dict[str, int] = {}
        if wanted:
            response = await self.client.metadata(wanted)
            for t in response.topics:
                if t.error_code == ErrorCode.none:
                    counts[t.name] = len(t.partitions)
        assign = ASSIGNORS[self.protocol or self.assignors[0]]
        result = assign(members, counts)
        log.debug("group %s generation %d: %s", self.group_id, self.generation_id, result)
        return {
            member_id: encode_assignment(result.get(member_id, []), versions[member_id])
            for member_id in members
        }

    async def _send_sync(self, assignments: dict[str, bytes]) -> list[TopicPartition] | None:
        session = await self.coordinator()
        response = await session.send(
            session.request(
                SYNC_GROUP,
                "SyncGroupRequest",
                group_id=self.group_id,
                generation_id=self.generation_id,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=self.protocol,
                assignments=tuple(
                    session.request(
                        SYNC_GROUP, "SyncGroupRequestAssignment", member_id=m, assignment=a
                    )
                    for m, a in assignments.items()
                ),
            )
        )
        if response.error_code in REJOIN:
            await self._handle_rejoin_error(response.error_code)
            return None
        check(response.error_code, None, self.group_id)
        return decode_assignment(response.assignment)

    async def _apply(self, assigned: set[TopicPartition]) -> None:
        revoked = self.owned - assigned
        added = assigned - self.owned
        if revoked:
            self.owned -= revoked
            await self.rebalance.revoke(revoked)
            # The revoked partitions wait for this member's next join to find their owner.
            self._joined_topics = None
            self.wake()
        self.owned |= added
        await self.rebalance.assign(added)

    # -- heartbeating -----------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        session = await self.coordinator()
        response = await session.send(
            session.request(
                HEARTBEAT,
                "HeartbeatRequest",
                group_id=self.group_id,
                generation_id=self.generation_id,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
            )
        )
        if response.error_code in REJOIN:
            await self._handle_rejoin_error(response.error_code)
            return
        check(response.error_code, None, self.group_id)

    async def _handle_rejoin_error(self, code: int) -> None:
        self._joined_topics = None
        if code != ErrorCode.rebalance_in_progress:
            # The member is out of the generation: what it owned is someone else's now.
            lost, self.owned = self.owned, set()
            if code == ErrorCode.unknown_member_id:
                self.member_id = ""
            self.generation_id = NO_GENERATION
            await self.rebalance.lose(lost)

    # -- leaving ----------------------------------------------------------------------------

    async def _leave(self) -> None:
        if self.group_instance_id is not None:
            return  # a static member keeps its place until its session times out
        session = await self.coordinator()
        response = await session.send(
            session.request(
                LEAVE_GROUP,
                "LeaveGroupRequest",
                group_id=self.group_id,
                member_id=self.member_id,
                members=(
                    session.request(
                        LEAVE_GROUP,
                        "MemberIdentity",
                        member_id=self.member_id,
                        group_instance_id=None,
                        reason="the consumer is leaving the group",
                    ),
                ),
            )
        )
        check(response.error_code, None, self.group_id)

    def _reset_membership(self) -> None:
        if self.group_instance_id is None:
            self.member_id = ""
        self.generation_id = NO_GENERATION
        self._joined_topics = None
