"""The broker process: wires the metadata store, logs and request handlers to listeners.

Logs are mutated only on the event loop thread (they are plain objects, not thread-safe);
metadata-store writes and recovery run in threads so that the loop never waits on the disk.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from broker.apis.registry import API_SPECS, CONSUMER_PROTOCOL_APIS
from broker.config import BrokerConfig, render, validate_dynamic_broker_configs
from broker.controller.placement import assigned_replicas, place_replicas
from broker.coordinator.config import GroupCoordinatorConfig
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.transaction_coordinator import (
    TransactionCoordinator,
    TransactionCoordinatorConfig,
)
from broker.fetch_session import FetchSessionCache
from broker.metadata.cluster import BrokerRegistration, PartitionRegistration
from broker.metadata.features import (
    DEFAULT_LEVELS,
    GROUP_VERSION,
    FeatureUpdate,
    FinalizedFeatures,
)
from broker.metadata.image import MetadataImage, TopicMetadata
from broker.metadata.postgres_store import PostgresMetadataStore, TopicExistsError
from broker.metadata.store import SqliteMetadataStore
from broker.quota.client_quotas import ClientQuotaEntity, ClientQuotas
from broker.quota.quota_manager import BrokerQuotas
from broker.security.authorizer import StandardAuthorizer, parse_super_users
from broker.security.listener import inter_broker_security, listener_security
from broker.security.scram import ScramCredential, ScramMechanism
from broker.server.cluster_runtime import ClusterRuntime
from broker.server.connection import KafkaConnection
from broker.server.connection_quotas import ConnectionQuotas
from broker.server.coordinator_runtime import CoordinatorRuntime
from broker.server.loop_monitor import LoopMonitor
from broker.server.metrics import BrokerMetrics, serve_metrics
from broker.server.replica_manager import ReplicaManager
from broker.server.transaction_runtime import TransactionRuntime
from broker.storage import Log, LogManager
from broker.storage.cleaner import CleanerConfig, LogCleaner

log = logging.getLogger("broker")

# Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE: ids reserved in the store at a time.
PRODUCER_ID_BLOCK_SIZE = 1000


def _completes_when_cancelled(change):
    """A metadata change, once begun, finishes even if the request that asked for it is
    cancelled (its client disconnected): the store and the in-memory image must not part."""

    @functools.wraps(change)
    async def shielded(self, *args, **kwargs):
        return await asyncio.shield(change(self, *args, **kwargs))

    return shielded


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.features = FinalizedFeatures()  # the store's, from start()
        self._refresh_api_specs()
        self.metrics = BrokerMetrics()
        self.loop_monitor = LoopMonitor()
        self.metrics.registry.register(self.loop_monitor)
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        self.metrics.add_fetch_session_gauges(self.fetch_sessions)
        self.connections: set[KafkaConnection] = set()
        # Connections over their address's connection_creation_rate, held until closed.
        self.held_connections: set[KafkaConnection] = set()
        self.connection_quotas = ConnectionQuotas(config)
        self.quotas = BrokerQuotas(
            config["quota.window.num"],
            config["quota.window.size.seconds"] * 1000,
            config["controller.quota.window.num"],
            config["controller.quota.window.size.seconds"] * 1000,
        )
        self.metrics.add_quota_gauges(self.quotas)
        # TLS contexts and SASL settings per listener: a bad one stops the broker here.
        self.listener_security = {
            name: listener_security(config, name) for name, _, _ in config.listeners()
        }
        # How this broker connects to the others: only a cluster's brokers do.
        self.inter_broker_security = (
            inter_broker_security(config) if config["metadata.store.url"] else None
        )
        self.scram_credentials: dict[tuple[str, str], ScramCredential] = {}
        self.bound: dict[str, tuple[str, int]] = {}
        self.metrics_address: tuple[str, int] | None = None
        self.dynamic_broker_configs: dict[str, str] = {}
        self.group_configs: dict[str, dict[str, str]] = {}
        self.authorizer: StandardAuthorizer | None = None  # None: authorizer.class.name unset
        self._servers: list[asyncio.Server] = []
        self._background: list[asyncio.Task] = []
        self._blocking: set[asyncio.Future] = set()
        self._metadata_lock = asyncio.Lock()
        self._producer_id_lock = asyncio.Lock()
        self._next_producer_id = self._producer_id_block_end = 0
        # One thread: metadata writes stay ordered and SQLite sees a single writer.
        self._metadata_thread = ThreadPoolExecutor(1, thread_name_prefix="fjord-metadata")
        self.image: MetadataImage
        self.cluster: ClusterRuntime | None = None  # set when metadata.store.url is shared
        self.log_manager: LogManager
        self.replica_manager: ReplicaManager

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        for d in self.config.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        url = self.config["metadata.store.url"]
        if url:
            self.store = await asyncio.to_thread(
                functools.partial(
                    PostgresMetadataStore,
                    url,
                    transaction_timeout_ms=self.config["broker.session.timeout.ms"],
                )
            )
        else:
            self.store = SqliteMetadataStore(self.config.log_dirs[0])
        self.image = await self._in_metadata_thread(self.store.load, self.config["cluster.id"])
        if url:
            self.cluster = ClusterRuntime(self)
            await self.cluster.load_image()
        else:
            self.image.make_single_node(self.node_id, BrokerRegistration(self.node_id, 0))
        self.dynamic_broker_configs = await self._in_metadata_thread(self.store.broker_configs)
        self.config.set_dynamic(validate_dynamic_broker_configs(self.dynamic_broker_configs))
        self.group_configs = await self._in_metadata_thread(self.store.group_configs)
        self.scram_credentials = await self._in_metadata_thread(self.store.scram_credentials)
        self.quotas.configs = ClientQuotas(await self._in_metadata_thread(self.store.client_quotas))
        self.features = FinalizedFeatures(
            *await self._in_metadata_thread(self.store.finalized_features, DEFAULT_LEVELS)
        )
        self._refresh_api_specs()
        if self.config["authorizer.class.name"]:
            self.authorizer = StandardAuthorizer(
                parse_super_users(self.config["super.users"]),
                self.config["allow.everyone.if.no.acl.found"],
                await self._in_metadata_thread(self.store.acls),
            )

        # In a cluster the high watermark waits for the ISR and survives restarts in its
        # checkpoint; alone, every write is committed as it is appended.
        self.log_manager = LogManager(
            self.config.log_dirs, high_watermark_follows_appends=self.cluster is None
        )
        self.replica_manager = ReplicaManager(
            self.config, self.log_manager, self.image, self.fetch_sessions
        )
        topics = {t.name: t for t in self.image.topics()}
        await asyncio.to_thread(
            self.log_manager.load, lambda name: self.replica_manager.log_config(topics.get(name))
        )
        self._drop_stray_logs()
        self.log_cleaner = LogCleaner(self.log_manager, self._cleaner_config)
        self.metrics.add_log_cleaner_gauges(self.log_cleaner)
        # Log dirs from before the log cleaner kept the internal topics forever and let the
        # coordinators compact them; now the cleaner does, for old and new alike.
        for topic in self.image.topics():
            if topic.internal and topic.configs.get("cleanup.policy") != "compact":
                await self.set_topic_configs(
                    topic.name, {**topic.configs, "cleanup.policy": "compact"}
                )
        # As Kafka's loadProducerState: producers that expired while the broker was down are
        # not brought back by their snapshot.
        self._expire_producer_ids(int(time.time() * 1000))
        for topic in self.image.topics():
            self.replica_manager.open_partitions(topic)
        self.metrics.add_partition_gauges(self._partition_logs)
        self.metrics.add_replication_gauges(self)
        self.group_coordinator = GroupCoordinator(
            GroupCoordinatorConfig.from_broker(self.config), self.image, self.group_configs
        )
        self.coordinator_runtime = CoordinatorRuntime(self, self.group_coordinator)
        replayed = self.coordinator_runtime.partitions.follow_leadership()
        log.info("group coordinator loaded %d record(s) from __consumer_offsets", replayed)
        self.transaction_coordinator = TransactionCoordinator(
            TransactionCoordinatorConfig.from_broker(self.config)
        )
        self.transaction_runtime = TransactionRuntime(self, self.transaction_coordinator)
        self.metrics.add_transaction_gauges(self.transaction_coordinator)
        replayed = self.transaction_runtime.partitions.follow_leadership()
        log.info("transaction coordinator loaded %d record(s) from __transaction_state", replayed)

        loop = asyncio.get_running_loop()
        for name, host, port in self.config.listeners():
            server = await loop.create_server(
                lambda name=name: KafkaConnection(self, name, self.listener_security[name]),
                host or None,
                port,
                ssl=self.listener_security[name].ssl_context,
                reuse_address=True,
                backlog=1024,
                # Bound now (a cluster registers the ports), serving once the broker is ready.
                start_serving=False,
            )
            self._servers.append(server)
            bound_port = server.sockets[0].getsockname()[1]
            self.bound[name] = (host, bound_port)
        metrics_url = self.config["metrics.listener"]
        if metrics_url:
            metrics_server = await serve_metrics(self.metrics, metrics_url)
            self._servers.append(metrics_server)
            self.metrics_address = metrics_server.sockets[0].getsockname()[:2]
        checkpoint = self.log_manager.checkpoint
        self._background = [
            asyncio.create_task(job)
            for job in (
                self._every("log.retention.check.interval.ms", self._enforce_retention),
                # fsyncs run in a thread: the loop keeps serving meanwhile
                self._every(
                    "log.flush.scheduler.interval.ms", self.log_manager.flush_dirty, in_thread=True
                ),
                self._every(
                    "log.flush.offset.checkpoint.interval.ms",
                    lambda now_ms: checkpoint(),
                    in_thread=True,
                ),
                self._every("producer.id.expiration.check.interval.ms", self._expire_producer_ids),
                # Cleaning reads and rewrites whole segments: always in a thread.
                self._every("log.cleaner.backoff.ms", self._clean_logs, in_thread=True),
                self._every(
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                    self.transaction_runtime.abort_timed_out,
                ),
                self._every(
                    "transaction.remove.expired.transaction.cleanup.interval.ms",
                    lambda now_ms: self.transaction_runtime.expire_transactional_ids(now_ms),
                ),
            )
        ]
        if self.cluster is not None:
            await self.cluster.start()
            await self.cluster.until_unfenced()
        for server in self._servers:
            await server.start_serving()
        self.loop_monitor.start()
        addresses = ", ".join(f"{n}://{h or '0.0.0.0'}:{p}" for n, (h, p) in self.bound.items())
        log.info(
            "Fjord broker %d started (cluster %s), listening on %s",
            self.node_id,
            self.image.cluster_id,
            addresses,
        )

    async def stop(self) -> None:
        if self.cluster is not None:
            if self.config["controlled.shutdown.enable"]:
                await self.cluster.controlled_shutdown(
                    self.config["broker.session.timeout.ms"] / 1000
                )
            await self.cluster.stop()
        self.loop_monitor.stop()
        self.coordinator_runtime.stop()
        await self.transaction_runtime.stop()
        self.log_cleaner.shutdown()  # a round in progress stops at its next batch
        for server in self._servers:
            server.close()
        for task in self._background:
            task.cancel()
        for conn in [*self.connections, *self.held_connections]:
            conn.close()
        for server in self._servers:
            await server.wait_closed()
        await asyncio.gather(*self._background, return_exceptions=True)
        # Wait for work already begun: metadata changes (they hold the lock) and blocking
        # jobs in threads, which cancellation does not stop.
        async with self._metadata_lock:
            await asyncio.gather(*self._blocking, return_exceptions=True)
        self.log_manager.close()
        self.store.close()
        self._metadata_thread.shutdown()
        log.info("Fjord broker %d stopped cleanly", self.node_id)

    async def _every(self, config_name: str, job, in_thread: bool = False) -> None:
        while True:
            interval_ms = min(self.config[config_name], 2**31)
            await asyncio.sleep(interval_ms / 1000)
            now_ms = int(time.time() * 1000)
            try:
                if in_thread:
                    await self.run_blocking(job, now_ms)
                elif inspect.iscoroutinefunction(job):
                    await job(now_ms)
                else:
                    job(now_ms)
            except Exception:
                log.exception("background job for %s failed", config_name)

    async def _enforce_retention(self, now_ms: int) -> None:
        # Segments are unlinked later (file.delete.delay.ms); only the checkpoint blocks.
        if self.replica_manager.enforce_retention(now_ms):
            await self.run_blocking(self.log_manager.checkpoint)

    def _cleaner_config(self) -> CleanerConfig:
        return CleanerConfig(
            dedupe_buffer_size=self.config["log.cleaner.dedupe.buffer.size"],
            dedupe_buffer_load_factor=self.config["log.cleaner.io.buffer.load.factor"],
        )

    def _clean_logs(self, now_ms: int) -> int:
        """Blocking: clean the logs due for it, one round after another (Kafka's cleaner
        thread). Off the loop; each log's lock is taken only to swap a cleaned segment in."""
        if not self.config["log.cleaner.enable"]:
            return 0
        return self.log_cleaner.clean_logs()

    def _expire_producer_ids(self, now_ms: int) -> None:
        expiration_ms = self.config["producer.id.expiration.ms"]
        for _, log_ in self.log_manager.logs():
            log_.producer_state.remove_expired(now_ms, expiration_ms)

    async def generate_producer_id(self) -> int:
        """A producer id never handed out before, from a block reserved in the metadata store
        (Kafka's ProducerIdManager); ids left in a block at shutdown are skipped."""
        async with self._producer_id_lock:
            if self._next_producer_id >= self._producer_id_block_end:
                first = await self._in_metadata_thread(
                    self.store.allocate_producer_ids, PRODUCER_ID_BLOCK_SIZE
                )
                self._next_producer_id = first
                self._producer_id_block_end = first + PRODUCER_ID_BLOCK_SIZE
            self._next_producer_id += 1
            return self._next_producer_id - 1

    def run_blocking(self, fn, *args) -> asyncio.Future:
        """Run blocking work (fsync, file creation) in a thread. A cancelled caller stops
        waiting, not the work; stop() waits for whatever is still running."""
        return asyncio.shield(self.start_blocking(fn, *args))

    def start_blocking(self, fn, *args) -> asyncio.Future:
        """run_blocking's work itself: done when the thread is, whoever stopped waiting."""
        return self.track(asyncio.ensure_future(asyncio.to_thread(fn, *args)))

    def track(self, future: asyncio.Future) -> asyncio.Future:
        """Have stop() wait for `future` (work that must not be cut short), and return it."""
        self._blocking.add(future)
        future.add_done_callback(self._blocking.discard)
        return future

    async def _in_metadata_thread(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._metadata_thread, fn, *args)

    def _drop_stray_logs(self) -> None:
        """Logs of topics the store no longer knows (a delete interrupted by a crash), and in
        a cluster of partitions whose replicas no longer include this broker (moved away)."""
        for (topic, partition), _ in list(self.log_manager.logs()):
            reg = self.image.partition(topic, partition)  # None: no such topic or partition
            if reg is None or self.node_id not in reg.replicas:
                log.warning("deleting stray log %s-%d", topic, partition)
                self.log_manager.delete(topic, partition)

    def _partition_logs(self):
        for (topic, partition), log_ in self.log_manager.logs():
            yield topic, partition, log_

    def advertised_address(self, listener: str) -> tuple[str, int]:
        for name, host, port in self.config.advertised_listeners():
            if name == listener:
                bound_host, bound_port = self.bound.get(name, (host, port))
                host = host or socket.getfqdn()
                return ("127.0.0.1" if host in ("0.0.0.0", "::") else host, port or bound_port)
        host, port = self.bound[listener]
        return host or socket.getfqdn(), port

    # -- authorization ------------------------------------------------------------------------

    def authorize(self, ctx, operation, resource_type, name: str) -> bool:
        """Whether ctx.principal from ctx.client_host may perform `operation` (AclOperation)
        on the resource (ResourceType, name); everything is allowed without an authorizer."""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(
            ctx.principal, ctx.client_host, operation, resource_type, name
        )

    def authorize_by_resource_type(self, ctx, operation, resource_type) -> bool:
        """Whether some resource of the type allows `operation` (Kafka's
        authorizeByResourceType)."""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize_by_resource_type(
            ctx.principal, ctx.client_host, operation, resource_type
        )

    @_completes_when_cancelled
    async def create_acls(self, bindings: list) -> None:
        """Store validated AclBindings, then apply them; existing ones are left as they are."""
        async with self._metadata_lock:
            await self._in_metadata_thread(self.store.add_acls, bindings)
            self.authorizer.add(bindings)
            self.fetch_sessions.all_partitions_changed()  # a DENY may end a session's access

    @_completes_when_cancelled
    async def delete_acls(self, filters: list) -> list[list]:
        """Delete the bindings each AclBindingFilter matches; returns them filter by filter."""
        async with self._metadata_lock:
            matched = [self.authorizer.acls(f) for f in filters]
            doomed = list({b for bindings in matched for b in bindings})
            await self._in_metadata_thread(self.store.remove_acls, doomed)
            self.authorizer.remove(doomed)
            self.fetch_sessions.all_partitions_changed()
            return matched

    # -- SCRAM credentials ---------------------------------------------------------------------

    def scram_credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self.scram_credentials.get((user, mechanism.mechanism_name))

    @_completes_when_cancelled
    async def alter_scram_credentials(
        self,
        upsertions: dict[tuple[str, str], ScramCredential],
        deletions: list[tuple[str, str]],
    ) -> None:
        """Store, then apply, one AlterUserScramCredentials request's validated changes.
        Connections already authenticated stay so, as in Kafka."""
        async with self._metadata_lock:
            await self._in_metadata_thread(
                self.store.alter_scram_credentials, upsertions, deletions
            )
            for key in deletions:
                self.scram_credentials.pop(key, None)
            self.scram_credentials.update(upsertions)

    @_completes_when_cancelled
    async def alter_client_quotas(
        self, changes: dict[ClientQuotaEntity, dict[str, float | None]]
    ) -> None:
        """Store, then enforce, one AlterClientQuotas request's validated changes."""
        async with self._metadata_lock:
            await self._in_metadata_thread(self.store.alter_client_quotas, changes)
            for entity, values in changes.items():
                self.quotas.configs.apply(entity, values)

    # -- feature flags ---------------------------------------------------------------------------

    @property
    def consumer_protocol_enabled(self) -> bool:
        """Kafka's KafkaApis.isConsumerGroupProtocolEnabled: the consumer protocol is in
        group.coordinator.rebalance.protocols and group.version is finalized at 1 or more."""
        return (
            "consumer" in self.config["group.coordinator.rebalance.protocols"]
            and self.features.level(GROUP_VERSION) >= 1
        )

    def _refresh_api_specs(self) -> None:
        """Without the consumer protocol its APIs are not advertised (nor served)."""
        enabled = self.consumer_protocol_enabled
        self.api_specs = {
            key: spec
            for key, spec in API_SPECS.items()
            if enabled or key not in CONSUMER_PROTOCOL_APIS
        }

    @_completes_when_cancelled
    async def update_features(self, updates: list[FeatureUpdate], validate_only: bool) -> None:
        """Check, then (unless validate_only) store and apply one UpdateFeatures request's
        changes, all or none; raises InvalidFeatureUpdate. The next ApiVersions shows them."""
        async with self._metadata_lock:
            updated = self.features.updated(updates, self.node_id)
            if validate_only or updated is self.features:
                return
            await self._in_metadata_thread(
                self.store.set_finalized_features, updated.levels, updated.epoch
            )
            self.features = updated
            self._refresh_api_specs()
            log.info("finalized features %s (epoch %d)", updated.levels, updated.epoch)

    # -- state changes (serialized; durable in the store before they become visible) ---------

    def usable_brokers(self) -> list[int]:
        return sorted(self.image.usable_brokers())

    @_completes_when_cancelled
    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        replication_factor: int = 1,
        assignment: list[tuple[int, ...]] | None = None,
    ) -> TopicMetadata:
        """Create the topic, its replicas placed over the usable brokers unless `assignment`
        names them partition by partition (validated by the caller)."""
        async with self._metadata_lock:
            existing = self.image.topic(name)
            if existing is not None:
                return existing
            topic = TopicMetadata(name, uuid.uuid4(), partitions, dict(configs))
            if self.cluster is not None:
                placed = self._placement(assignment, partitions, replication_factor)
                try:
                    await self._in_metadata_thread(self.store.create_topic, topic, placed)
                except TopicExistsError:
                    pass  # another broker created it first: theirs stands
                await self.cluster.catch_up()
                return self.image.topic(name)
            await self._in_metadata_thread(self.store.create_topic, topic)
            await self.run_blocking(self.replica_manager.open_partitions, topic)
            self.image.put(topic)
            log.info("created topic %s with %d partition(s)", name, partitions)
            self._topics_changed()
            return topic

    def _placement(
        self,
        assignment: list[tuple[int, ...]] | None,
        partitions: int,
        replication: int,
        first_partition: int = 0,
    ) -> dict[int, PartitionRegistration]:
        usable = self.usable_brokers()
        if assignment is not None:
            return assigned_replicas(assignment, usable, first_partition)
        return place_replicas(usable, partitions, replication, first_partition)

    async def auto_create_topic(self, name: str) -> TopicMetadata | None:
        """A topic created because a client asked Metadata for it: default.replication.factor
        replicas, as many as there are usable brokers for it; None while there is none."""
        usable = len(self.usable_brokers())
        if usable == 0:
            return None
        replication = min(self.config["default.replication.factor"], usable)
        return await self.create_topic(name, self.config["num.partitions"], {}, replication)

    @_completes_when_cancelled
    async def delete_topic(self, name: str) -> None:
        async with self._metadata_lock:
            topic = self.image.topic(name)
            if topic is None:
                return
            await self._in_metadata_thread(self.store.delete_topic, name)
            if self.cluster is not None:
                await self.cluster.catch_up()
            else:
                await self.forget_topic(topic)

    async def forget_topic(self, topic: TopicMetadata) -> None:
        """A deleted topic leaves the image, its logs the disk, its offsets every group."""
        self.image.remove(topic.name)
        self.replica_manager.release_waiters(topic)
        if self.cluster is not None:
            for partition in range(topic.partitions):
                self.cluster.fetchers.unfollow((topic.name, partition))
        await self.run_blocking(self.replica_manager.delete_logs, topic)
        log.info("deleted topic %s", topic.name)
        if self.image.topic("__consumer_offsets") is not None:
            self.coordinator_runtime.apply(self.group_coordinator.on_topic_deleted(topic.name))
        self._topics_changed()

    @_completes_when_cancelled
    async def add_partitions(
        self, name: str, count: int, assignment: list[tuple[int, ...]] | None = None
    ) -> None:
        """Grow the topic to `count` partitions, the new ones placed as in create_topic."""
        async with self._metadata_lock:
            topic = self.image.topic(name)
            if self.cluster is not None:
                replication = self.image.partition(name, 0).replication_factor
                placed = self._placement(
                    assignment, count - topic.partitions, replication, topic.partitions
                )
                await self._in_metadata_thread(self.store.set_partitions, name, count, placed)
                await self.cluster.catch_up()
                return
            await self._in_metadata_thread(self.store.set_partitions, name, count)
            grown = TopicMetadata(name, topic.topic_id, count, topic.configs)
            await self.run_blocking(self.replica_manager.open_partitions, grown)
            topic.partitions = count
            self._topics_changed()

    @_completes_when_cancelled
    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        async with self._metadata_lock:
            topic = self.image.topic(name)
            await self._in_metadata_thread(self.store.set_topic_configs, name, configs)
            if self.cluster is not None:
                await self.cluster.catch_up()
                return
            topic.configs = dict(configs)
            self.replica_manager.reconfigure([topic])

    @_completes_when_cancelled
    async def set_broker_configs(self, configs: dict[str, str]) -> None:
        async with self._metadata_lock:
            parsed = validate_dynamic_broker_configs(configs)
            stored = {k: render(v) for k, v in parsed.items()}
            await self._in_metadata_thread(self.store.set_broker_configs, stored)
            self.dynamic_broker_configs = stored
            self.config.set_dynamic(parsed)
            self.replica_manager.reconfigure()

    def follow_coordinator_leadership(self) -> None:
        """Leadership of internal topics' partitions moved: the coordinators load the
        partitions led here and let the others go."""
        self.coordinator_runtime.partitions.follow_leadership()
        self.transaction_runtime.partitions.follow_leadership()

    def _topics_changed(self) -> None:
        """Consumer groups subscribed to changed topics get a new target assignment."""
        if self.image.topic("__consumer_offsets") is not None:
            now_ms = int(time.time() * 1000)
            self.coordinator_runtime.apply(
                self.group_coordinator.consumer.on_metadata_change(now_ms)
            )

    @_completes_when_cancelled
    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        async with self._metadata_lock:
            await self._in_metadata_thread(self.store.set_group_configs, group_id, configs)
            if configs:
                self.group_configs[group_id] = dict(configs)
            else:
                self.group_configs.pop(group_id, None)

    async def delete_records(self, log_: Log, offset: int) -> int:
        low_watermark = log_.delete_records_before(offset)
        self.replica_manager.log_start_moved(log_)
        await self.run_blocking(self.log_manager.checkpoint)
        return low_watermark
