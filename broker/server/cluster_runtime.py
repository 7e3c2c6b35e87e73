"""A broker's part in a cluster whose metadata lives in PostgreSQL (`metadata.store.url`).

- Membership: the broker registers (a new broker epoch each start) and renews its lease every
  broker.heartbeat.interval.ms; it starts fenced, and the controller unfences it once it has
  left every ISR it was in, so a restarted broker must catch up before it is in sync again.
- Metadata: the store's change feed names what changed; the broker re-reads it and applies it
  (topics, partition registrations, brokers, ACLs, credentials, quotas, configs, features),
  woken by LISTEN/NOTIFY and, lest a notification be lost, on a timer.
- Controller: whichever broker holds the controller lease fences brokers whose lease lapsed,
  unfences those back, and elects leaders; each of its writes is conditional on its
  controller epoch, so one that was paused past its lease changes nothing.
- Replication: partitions led here follow their followers' fetches (ISR, high watermark);
  ISR changes are conditional on the partition epoch. Partitions followed here are fetched
  by the replica fetchers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from broker.client.cluster import ask_metadata
from broker.config import validate_dynamic_broker_configs
from broker.controller.elections import (
    partition_changes,
    preferred_leader_changes,
    reassignment_changes,
)
from broker.metadata.cluster import BrokerRegistration
from broker.metadata.features import DEFAULT_LEVELS, FinalizedFeatures
from broker.metadata.store import RELOAD_ALL, MetadataStoreUnavailable
from broker.quota.client_quotas import ClientQuotas
from broker.replication.partition import IsrProposal, Partition
from broker.replication.superseded import PeerLeadership
from broker.security.authorizer import StandardAuthorizer, parse_super_users
from broker.server.inter_broker import InterBrokerSessions
from broker.server.outage_log import OutageLog
from broker.server.replica_fetcher import ReplicaFetcherManager

log = logging.getLogger("broker.cluster")

# The feed is re-read at least this often even if no notification arrives.
FEED_POLL_S = 1.0
# How often the controller looks for brokers gone (their liveness lock free).
CONTROLLER_TICK_S = 0.05
# How often, and for how long, the controller looks after a connection to a broker was
# lost: a process killed frees its lock moments after its connections drop.
SUSPECT_TICK_S = 0.005
SUSPECT_WINDOW_S = 0.1
# When a broker lost is asked after again while its lock is still held: the database may
# see the connection drop a moment after this broker did (later still on a loaded machine).
LOST_RECHECKS_S = (0.01, 0.02, 0.04, 0.08)
# How long Metadata holds its answer while a partition asked about is led by a broker this
# one just lost: the controller elects a successor within milliseconds of a process's death,
# where a client told "no leader" may look again only a second later (librdkafka, when the
# leader's connection dropped with no request of the partition's in flight). Past it the
# answer says no leader, as before.
SUCCESSION_WAIT_S = 0.5
LATEST = 2**62
# What each loop that calls the store is doing, as its outage warnings say.
FOLLOWING_CHANGES = "following metadata changes"
RENEWING_LEASE = "renewing the broker lease"
CONTROLLING = "controller"


def _now_ms() -> int:
    return int(time.time() * 1000)


def isr_change(partition: Partition) -> str:
    topic, index = partition.tp
    return f"{topic}-{index}: writing an ISR change"


class ClusterRuntime:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.store = broker.store
        self.config = broker.config
        self.broker_epoch = -1
        self.controller_epoch: int | None = None  # while this broker is the controller
        self.version = 0
        self.fetchers = ReplicaFetcherManager(broker)
        self._catch_up_lock = asyncio.Lock()
        self._controller_wakeup = asyncio.Event()
        self._changed = asyncio.Event()  # what _until waits on: metadata applied, a lost one lives
        self._tasks: list[asyncio.Task] = []
        self._next_rebalance = 0.0  # loop time of the next preferred-leader check
        self._decisions_due = True  # the metadata changed since the controller last looked
        self._gone_before: set[int] = set()  # brokers found gone in the controller's last round
        self._suspect_until = 0.0  # loop time until which the controller looks more often
        # Brokers this one lost a connection to, by the broker epoch they had then, while
        # not known to live (see connection_lost).
        self._lost: dict[int, int] = {}
        self.outages = OutageLog(log)
        self.peers = InterBrokerSessions(broker, "fjord-peer-metadata", log)

    async def meta(self, fn, *args):
        return await self.broker._in_metadata_thread(fn, *args)

    # -- start ---------------------------------------------------------------------------------

    async def load_image(self) -> None:
        """Before the logs open: the whole image, as of a version the feed continues from."""
        image = self.broker.image
        self.version = (await self.meta(self.store.changes_since, LATEST))[0]
        registrations = await self.meta(self.store.partitions)
        for topic in image.topics():
            image.put(topic, registrations.get(topic.name, {}))
        image.brokers = await self.meta(self.store.brokers)
        image.controller_id, _ = await self.meta(self.store.controller)

    async def start(self) -> None:
        """After the listeners are bound: register, take up the partitions, start the loops."""
        endpoints = {
            name: self.broker.advertised_address(name) for name, _, _ in self.config.listeners()
        }
        registration = BrokerRegistration(self.broker.node_id, -1, endpoints)
        self.broker_epoch = await self.meta(
            self.store.register_broker, registration, self.config["broker.session.timeout.ms"]
        )
        log.info("registered as broker %d, epoch %d", self.broker.node_id, self.broker_epoch)
        self.broker.replica_manager.broker_epoch = self.broker_epoch
        self.broker.replica_manager.on_isr_change = self._schedule_isr_change
        await self.catch_up(everything=True)
        self._tasks = [
            asyncio.create_task(job())
            for job in (
                self._heartbeats,
                self._follow_feed,
                self._control,
                self._shrink_isrs,
                self._learn_from_peers,
            )
        ]

    async def controlled_shutdown(self, timeout_s: float) -> None:
        """Hand leadership over before stopping (controlled.shutdown.enable): the controller
        moves every partition led here to another in-sync replica."""
        try:
            await self.meta(
                self.store.begin_controlled_shutdown, self.broker.node_id, self.broker_epoch
            )
        except MetadataStoreUnavailable:
            return
        partitions = self.broker.replica_manager.partitions
        await self._until(
            lambda: (
                not any(p.is_leader and len(p.registration.isr) > 1 for p in partitions.values())
            ),
            timeout_s,
        )

    async def until_unfenced(self) -> None:
        """Until the controller has unfenced this registration, as Kafka's brokers take no
        requests before: fenced, this broker's Metadata would list no broker at all."""
        if not self.broker.replica_manager.may_lead():
            log.info("waiting for the controller to unfence broker %d", self.broker.node_id)
            await self._until(self.broker.replica_manager.may_lead)

    async def _until(self, done: Callable[[], bool], timeout_s: float | None = None) -> None:
        """Until `done()` holds after the metadata applied, or `timeout_s` passed."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while not done() and (deadline is None or loop.time() < deadline):
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._changed.wait(), None if deadline is None else deadline - loop.time()
                )

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.fetchers.stop()
        await self.peers.close()
        if self.controller_epoch is not None:
            with contextlib.suppress(MetadataStoreUnavailable):
                await self.meta(
                    self.store.resign_controller, self.broker.node_id, self.controller_epoch
                )

    # -- the change feed -----------------------------------------------------------------------

    async def _follow_feed(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                # The wait blocks a thread of its own (its own connection), not the metadata
                # one; a lost connection is re-made by the next wait, the timer's catch-up
                # covers what its notifications would have said.
                await loop.run_in_executor(None, self.store.wait_for_change, FEED_POLL_S)
            except MetadataStoreUnavailable:
                pass
            try:
                await self.catch_up()
                self.outages.succeeded(FOLLOWING_CHANGES)
            except MetadataStoreUnavailable as e:
                self.outages.failed(FOLLOWING_CHANGES, e)
                await asyncio.sleep(FEED_POLL_S)  # retry later, not in a tight loop
            except Exception:
                log.exception("applying metadata changes failed")

    async def _learn_from_peers(self) -> None:
        """While the feed cannot reach the store: ask the other brokers about the partitions
        this one leads, and give up those a newer leader epoch leads
        (broker.replication.superseded). Once the store answers, its record alone counts."""
        superseded = self.broker.replica_manager.superseded
        while True:
            await asyncio.sleep(FEED_POLL_S)
            if self.outages.ongoing(FOLLOWING_CHANGES):
                await self._ask_peers()
            else:
                superseded.clear()

    async def _ask_peers(self) -> None:
        rm = self.broker.replica_manager
        topics = sorted({t for (t, _), p in rm.partitions.items() if p.is_leader})
        if not topics:
            return
        node = self.broker.node_id
        asks = [
            self.peers.send(n, lambda session: ask_metadata(session, topics), "Metadata")
            for n in self.broker.image.brokers
            if n != node
        ]
        for asked in asyncio.as_completed(asks):
            response = await asked
            for topic in response.topics if response is not None else ():
                for p in topic.partitions:
                    tp = (topic.name, p.partition_index)
                    newer = PeerLeadership(
                        p.leader_id, p.leader_epoch, tuple(p.replica_nodes), tuple(p.isr_nodes)
                    )
                    if rm.supersede(tp, newer):
                        log.warning(
                            "%s-%d: led by broker %d at epoch %d, another broker says, where the "
                            "metadata store cannot tell this one: no longer led here",
                            *tp,
                            newer.leader,
                            newer.leader_epoch,
                        )

    async def catch_up(self, everything: bool = False) -> None:
        """Apply every change committed since the last one applied."""
        async with self._catch_up_lock:
            latest, changes = await self.meta(self.store.changes_since, self.version)
            if everything or RELOAD_ALL in changes:
                changes = {RELOAD_ALL}
            for entity, key in sorted(changes):
                await self._apply(entity, key)
            self.version = max(self.version, latest)
            if changes:
                self._decisions_due = True
                self._controller_wakeup.set()
                self._changed.set()

    async def _apply(self, entity: str, key: str) -> None:
        broker, store = self.broker, self.store
        if (entity, key) == RELOAD_ALL:
            # Brokers first: whether this one is fenced decides whether it may lead.
            for other in ("brokers", "controller", "acls", "scram", "quotas", "broker_configs"):
                await self._apply(other, "")
            stored = await self.meta(store.load, broker.image.cluster_id)
            for name in {t.name for t in broker.image.topics()} | {t.name for t in stored.topics()}:
                await self._apply_topic(name)
            await self._apply("features", "")
            await self._apply("group_configs", "")
        elif entity == "topic":
            await self._apply_topic(key)
        elif entity == "brokers":
            broker.image.brokers = await self.meta(store.brokers)
            # A broker lost and since fenced or registered again is what the image says.
            self._lost = {node: epoch for node, epoch in self._lost.items() if self.lost(node)}
        elif entity == "controller":
            broker.image.controller_id, _ = await self.meta(store.controller)
        elif entity == "acls":
            if broker.authorizer is not None:
                broker.authorizer = StandardAuthorizer(
                    parse_super_users(self.config["super.users"]),
                    self.config["allow.everyone.if.no.acl.found"],
                    await self.meta(store.acls),
                )
                broker.fetch_sessions.all_partitions_changed()
        elif entity == "scram":
            broker.scram_credentials = await self.meta(store.scram_credentials)
        elif entity == "quotas":
            broker.quotas.configs = ClientQuotas(await self.meta(store.client_quotas))
        elif entity == "broker_configs":
            stored = await self.meta(store.broker_configs)
            broker.dynamic_broker_configs = stored
            broker.config.set_dynamic(validate_dynamic_broker_configs(stored))
            broker.replica_manager.reconfigure()
        elif entity == "group_configs":
            # In place: the group coordinator holds this dict.
            stored = await self.meta(store.group_configs)
            broker.group_configs.clear()
            broker.group_configs.update(stored)
        elif entity == "features":
            broker.features = FinalizedFeatures(
                *await self.meta(store.finalized_features, DEFAULT_LEVELS)
            )
            broker._refresh_api_specs()

    async def _apply_topic(self, name: str) -> None:
        broker, rm, image = self.broker, self.broker.replica_manager, self.broker.image
        found = await self.meta(self.store.topic, name)
        current = image.topic(name)
        if current is not None and (found is None or found[0].topic_id != current.topic_id):
            await broker.forget_topic(current)
            current = None
        if found is None:
            return
        topic, registrations = found
        configs_changed = current is not None and current.configs != topic.configs
        image.put(topic, registrations)
        if rm.logs_missing(topic):  # most changes are ISR changes of partitions hosted already
            await broker.run_blocking(rm.open_partitions, topic)
        if configs_changed:
            rm.reconfigure([topic])
        await self.fetchers.truncations.finished(name)
        led, followed, removed = rm.apply_registrations(topic, _now_ms())
        # Before anything awaits: a fetch from the former leader still out must not append
        # to a log this broker now leads.
        for partition in led:
            self.fetchers.unfollow(partition.tp)
        if topic.internal:
            broker.follow_coordinator_leadership()
        for partition in removed:
            self.fetchers.unfollow(partition.tp)
            log.info("%s-%d: no longer a replica here, deleting it", *partition.tp)
            await broker.run_blocking(broker.log_manager.delete, *partition.tp)
        for partition in led:
            log.info(
                "%s-%d: leader at epoch %d, ISR %s",
                *partition.tp,
                partition.leader_epoch,
                partition.registration.isr,
            )
        for partition in followed:
            self.fetchers.follow(partition)
        if current is None or current.partitions != topic.partitions:
            broker._topics_changed()

    # -- membership ----------------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        interval = self.config["broker.heartbeat.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                alive = await self.meta(
                    self.store.heartbeat,
                    self.broker.node_id,
                    self.broker_epoch,
                    self.config["broker.session.timeout.ms"],
                )
            except MetadataStoreUnavailable as e:
                self.outages.failed(RENEWING_LEASE, e)
                continue
            except Exception:
                # Whatever failed, the loop must go on: without heartbeats the broker would
                # stay fenced for good.
                log.exception("renewing the broker lease failed")
                continue
            self.outages.succeeded(RENEWING_LEASE)
            if not alive:
                log.error(
                    "broker %d's registration (epoch %d) was replaced: is another process "
                    "running with this node.id?",
                    self.broker.node_id,
                    self.broker_epoch,
                )

    # -- the controller ------------------------------------------------------------------------

    async def _control(self) -> None:
        """Claim the controller lease when free; while holding it, renew it every heartbeat
        interval and look for brokers gone several times a second (a crashed broker's
        liveness lock frees at once, and a leader is elected without waiting for its lease)."""
        loop = asyncio.get_running_loop()
        renew_every = self.config["broker.heartbeat.interval.ms"] / 1000
        tick = min(renew_every, CONTROLLER_TICK_S)
        lease_ms = self.config["broker.session.timeout.ms"]
        node = self.broker.node_id
        renewed_at = 0.0
        while True:
            try:
                if self.controller_epoch is None:
                    self.controller_epoch = await self.meta(
                        self.store.claim_controller, node, self.broker_epoch, lease_ms
                    )
                    if self.controller_epoch is not None:
                        log.info("became the controller (epoch %d)", self.controller_epoch)
                        renewed_at = loop.time()
                        self._next_rebalance = (
                            loop.time() + self.config["leader.imbalance.check.interval.seconds"]
                        )
                        self._decisions_due = True
                elif loop.time() - renewed_at >= renew_every:
                    if await self.meta(
                        self.store.renew_controller, node, self.controller_epoch, lease_ms
                    ):
                        renewed_at = loop.time()
                    else:
                        log.warning("lost the controller lease (epoch %d)", self.controller_epoch)
                        self.controller_epoch = None
                if self.controller_epoch is not None:
                    await self._decide()
                self.outages.succeeded(CONTROLLING)
            except MetadataStoreUnavailable as e:
                self.outages.failed(CONTROLLING, e)
            except Exception:
                log.exception("controller round failed")
            self._controller_wakeup.clear()
            wait = SUSPECT_TICK_S if loop.time() < self._suspect_until else tick
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._controller_wakeup.wait(), wait)

    def connection_lost(self, node_id: int) -> None:
        """A connection to broker `node_id` was lost (a replica fetcher's). Until the store
        says its process lives, Metadata names it leader of nothing: a client that lost the
        same connection asks at once, and a dead leader named would have it wait to
        reconnect (librdkafka looks again only a second later). Metadata waits a moment for
        the successor instead (successors), and past that says no leader. If the process
        died, the controller (this broker, or this broker once it claims a dead controller's
        lease) fences it within milliseconds rather than at its next tick."""
        registration = self.broker.image.brokers.get(node_id)
        if registration is None or registration.fenced or node_id in self._lost:
            return
        self._lost[node_id] = registration.broker_epoch
        if self.is_controller or node_id == self.broker.image.controller_id:
            # Others would only contend for the controller's row and slow its writes.
            self._suspect_until = asyncio.get_running_loop().time() + SUSPECT_WINDOW_S
            self._controller_wakeup.set()
        self.broker.track(asyncio.create_task(self._confirm_lost(node_id)))

    async def _confirm_lost(self, node_id: int) -> None:
        """Keep `node_id` lost if its process is gone (until the image says what became of
        it: fenced, or registered again); forget it if it lives (a network fault)."""
        for pause in (0.0, *LOST_RECHECKS_S):
            await asyncio.sleep(pause)
            try:
                if not await self.meta(self.store.broker_alive, node_id):
                    log.info("broker %d is gone: its leadership is not offered", node_id)
                    return
            except MetadataStoreUnavailable:
                break  # cannot tell: not taken for gone
        self._lost.pop(node_id, None)
        self._changed.set()  # what Metadata waits on (successors) is decided: it lives

    async def settled(self) -> None:
        """Once the I/O that came in with a request has been handled: a client that lost
        its connection to a leader asks for metadata the moment it does, so its request and
        the drop of this broker's own connection to that leader arrive together. Two turns
        of the loop: one reads the drop, the next has the transport report it
        (connection_lost then knows it)."""
        for _ in range(2):
            await asyncio.sleep(0)

    def lost(self, node_id: int) -> bool:
        """Whether this broker lost its connection to `node_id`, registered as it is in the
        image, and does not know it to live."""
        epoch = self._lost.get(node_id)
        if epoch is None:
            return False
        registration = self.broker.image.brokers.get(node_id)
        return (
            registration is not None
            and not registration.fenced
            and registration.broker_epoch == epoch
        )

    async def successors(self, topics: list[str]) -> None:
        """Until no partition of `topics` is led by a broker this one lost (its successor is
        elected, or the broker known to live), at most SUCCESSION_WAIT_S."""
        if not self._lost:
            return
        image = self.broker.image
        waiting = [
            (name, index)
            for name in topics
            for index, reg in image.registrations(name).items()
            if self.lost(reg.leader)
        ]

        def decided() -> bool:
            return not any(
                (reg := image.partition(name, index)) is not None and self.lost(reg.leader)
                for name, index in waiting
            )

        if waiting:
            await self._until(decided, SUCCESSION_WAIT_S)

    @property
    def is_controller(self) -> bool:
        return self.controller_epoch is not None

    async def alter_partitions(self, changes: list) -> list[bool]:
        """Write partition changes as the controller (ElectLeaders, reassignments); all
        refused if this broker lost the controller lease meanwhile."""
        if self.controller_epoch is None:
            return [False] * len(changes)
        image = self.broker.image
        # Read before the write: the topic may be gone from the image once it is done.
        elections = [
            (reg := image.partition(t, i)) is not None and new.leader != reg.leader
            for t, i, _, new in changes
        ]
        applied = await self.meta(
            self.store.controller_alter_partitions,
            (self.broker.node_id, self.controller_epoch),
            changes,
        )
        self.broker.metrics.leader_elections.inc(
            sum(1 for ok, elected in zip(applied, elections, strict=True) if ok and elected)
        )
        await self.catch_up()
        if not all(applied):
            # Overtaken by a leader's ISR change the feed may have brought in already: the
            # next round decides again on what is stored now.
            self._decisions_due = True
        return applied

    async def _decide(self) -> None:
        controller = (self.broker.node_id, self.controller_epoch)
        store = self.store
        lapsed = await self.meta(store.lapsed_brokers)
        gone = {node_id for node_id, _ in lapsed}
        # A broker gone is fenced a round after its partitions were led elsewhere, not in
        # the same breath: librdkafka, told that a broker is gone moments before or after
        # being told who leads its partitions now, can lose the new leader and wait a second
        # to ask again.
        fenced = [(n, e) for n, e in lapsed if n in self._gone_before]
        for node_id, epoch in fenced:
            log.info("fencing broker %d (epoch %d): it is gone or its lease lapsed", node_id, epoch)
            await self.meta(store.set_broker_fenced, controller, node_id, epoch, True)
        if fenced:
            await self.catch_up()  # other changes arrive through the feed
        if gone - self._gone_before:
            self._decisions_due = True
        self._gone_before = gone
        rebalance = self.config["auto.leader.rebalance.enable"] and self._rebalance_due()
        if self._decisions_due or rebalance:
            # Only after a change: partitions are many, and nothing else moves them.
            self._decisions_due = False
            await self._change_partitions(rebalance, gone)
        renewed = await self.meta(store.renewed_brokers)
        if not renewed:
            return  # the usual case: nothing to look up across every partition
        image = self.broker.image
        in_isr = {
            r
            for t in image.topics()
            for reg in image.registrations(t.name).values()
            if len(reg.isr) > 1
            for r in reg.isr
        }
        for node_id, epoch in renewed:
            if node_id not in in_isr:
                await self.meta(store.set_broker_fenced, controller, node_id, epoch, False)

    async def _change_partitions(self, rebalance: bool, gone: set[int]) -> None:
        rm = self.broker.replica_manager
        changes = list(
            partition_changes(
                self.broker.image,
                lambda topic: rm.topic_config_value(topic, "unclean.leader.election.enable"),
                gone,
            )
        )
        if not gone:  # else once they are fenced: they would still count as usable here
            changes += reassignment_changes(self.broker.image)
            if rebalance:
                changes += preferred_leader_changes(self.broker.image, exclude=changes)
        if changes:
            await self.alter_partitions(changes)

    def _rebalance_due(self) -> bool:
        now = asyncio.get_running_loop().time()
        if now < self._next_rebalance:
            return False
        self._next_rebalance = now + self.config["leader.imbalance.check.interval.seconds"]
        return True

    # -- ISR changes (the leader's) ------------------------------------------------------------

    def _schedule_isr_change(self, partition: Partition, isr: tuple[int, ...]) -> None:
        proposal = partition.propose_isr(isr)
        self.broker.track(asyncio.create_task(self._write_isr(partition, proposal)))

    async def _write_isr(self, partition: Partition, proposal: IsrProposal) -> None:
        rm = self.broker.replica_manager
        new = proposal.registration
        try:
            applied, _ = await self.meta(
                self.store.alter_partition,
                partition.topic,
                partition.index,
                proposal.expected_partition_epoch,
                new,
                proposal.joining_epochs,
            )
        except MetadataStoreUnavailable as e:
            self.outages.failed(isr_change(partition), e)
            partition.proposal_failed(proposal)
            return
        self.outages.succeeded(isr_change(partition))
        if not applied:
            log.info(
                "%s-%d: ISR change to %s refused: the partition changed meanwhile, or a "
                "replica joining it is fenced, shutting down, gone or registered anew",
                *partition.tp,
                new.isr,
            )
            partition.proposal_failed(proposal)
            await self.catch_up()
            return
        self.broker.image.set_registration(partition.topic, partition.index, new)
        partition.update(new, _now_ms())
        if proposal.expands:
            self.broker.metrics.isr_expands.inc()
        else:
            self.broker.metrics.isr_shrinks.inc()
        log.info("%s-%d: ISR now %s", *partition.tp, new.isr)
        rm.maybe_increment_high_watermark(partition)
        rm._replication_changed(partition.tp)

    async def _shrink_isrs(self) -> None:
        lag_ms = self.config["replica.lag.time.max.ms"]
        while True:
            await asyncio.sleep(lag_ms / 2000)
            now = _now_ms()
            for partition in list(self.broker.replica_manager.partitions.values()):
                shrunk = partition.isr_shrink(now, lag_ms)
                if shrunk is not None:
                    self._schedule_isr_change(partition, shrunk)
