"""The PostgreSQL store of cluster mode: what several brokers share through it (the change
feed, memberships, the controller lease, partition registrations) and the epochs its
conditional writes check. Each broker is a store of its own, so each has its own connections,
as separate processes would."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import psycopg
import pytest
from polling import wait_for

from broker.metadata.cluster import NO_LEADER, BrokerRegistration, PartitionRegistration
from broker.metadata.image import TopicMetadata
from broker.metadata.postgres_store import RELOAD_ALL, PostgresMetadataStore, TopicExistsError
from broker.metadata.store import MetadataStoreUnavailable
from broker.quota.client_quotas import ClientQuotaEntity
from broker.security.acl import AccessControlEntry, AclBinding, ResourcePattern
from broker.security.operations import AclOperation, AclPermissionType, PatternType, ResourceType
from broker.security.scram import ScramCredential

LONG_MS = 600_000
WAIT_S = 30


@pytest.fixture
def open_store(postgres_url):
    """Opens another broker's store on the test's database each call."""
    stores = []

    def open_(**kwargs) -> PostgresMetadataStore:
        stores.append(PostgresMetadataStore(postgres_url, **kwargs))
        return stores[-1]

    yield open_
    for store in stores:
        store.close()


@pytest.fixture
def store(open_store) -> PostgresMetadataStore:
    return open_store()


def in_threads(*calls: Callable[[], object]) -> list[object]:
    """Run the calls together, each in a thread of its own released at the same moment;
    their results (or exceptions) in order."""
    start = threading.Barrier(len(calls))
    results: list[object] = [None] * len(calls)

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
        assert not t.is_alive()
    return results


def reg(*replicas: int, leader: int | None = None) -> PartitionRegistration:
    return PartitionRegistration(replicas, replicas, replicas[0] if leader is None else leader)


def broker(node_id: int) -> BrokerRegistration:
    return BrokerRegistration(node_id, 0, {"PLAINTEXT": ("127.0.0.1", 9092 + node_id)})


def feed_after(store: PostgresMetadataStore, write: Callable[[], object]) -> set:
    """What the change feed names for `write`'s change (empty: it recorded none)."""
    before, _ = store.changes_since(0)
    write()
    latest, changes = store.changes_since(before)
    assert (latest == before) == (not changes)
    return changes


def create(store: PostgresMetadataStore, name: str, *registrations: PartitionRegistration):
    topic = TopicMetadata(name, uuid.uuid4(), len(registrations))
    store.create_topic(topic, dict(enumerate(registrations)))
    return topic


# -- schema and load


def test_brokers_starting_together_create_the_schema_and_agree_on_the_cluster_id(postgres_url):
    stores = in_threads(*[lambda: PostgresMetadataStore(postgres_url)] * 3)
    try:
        assert all(isinstance(s, PostgresMetadataStore) for s in stores), stores

        ids = in_threads(*[lambda s=s: s.load(None).cluster_id for s in stores])

        assert len(set(ids)) == 1
    finally:
        for s in stores:
            if isinstance(s, PostgresMetadataStore):
                s.close()


def test_brokers_starting_together_finalize_the_features_once(open_store):
    stores = [open_store() for _ in range(3)]

    results = in_threads(
        *[lambda s=s: s.finalized_features({"metadata.version": 30}) for s in stores]
    )

    assert results == [({"metadata.version": 30}, 0)] * 3
    assert stores[0].changes_since(0)[1] == {("features", "")}


def test_tables_carry_the_prefix(store, postgres_url):
    with psycopg.connect(postgres_url) as conn:
        tables = {
            name
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            )
        }
    assert tables and all(name.startswith("fjord_meta_") for name in tables)


# -- topics and partition registrations


def test_topics_carry_their_partition_registrations(store):
    orders = create(store, "orders", reg(1, 2, 3), reg(2, 3, 1))
    create(store, "bare")

    assert store.topic("orders") == (orders, {0: reg(1, 2, 3), 1: reg(2, 3, 1)})
    assert store.topic("missing") is None
    assert store.partitions() == {"orders": {0: reg(1, 2, 3), 1: reg(2, 3, 1)}, "bare": {}}
    assert store.load(None).topic("orders") == orders


def test_added_partitions_bring_their_registrations(store):
    create(store, "orders", reg(1, 2))

    store.set_partitions("orders", 3, {1: reg(2, 1), 2: reg(1, 2)})

    topic, partitions = store.topic("orders")
    assert topic.partitions == 3
    assert partitions == {0: reg(1, 2), 1: reg(2, 1), 2: reg(1, 2)}


def test_a_deleted_topic_takes_its_registrations_and_a_new_one_of_its_name_starts_afresh(store):
    old = create(store, "orders", reg(1, 2))
    store.alter_partition("orders", 0, 0, reg(1, 2).with_isr((1,)))

    store.delete_topic("orders")
    assert store.topic("orders") is None and store.partitions() == {}

    new = create(store, "orders", reg(2, 1))
    assert store.topic("orders") == (new, {0: reg(2, 1)})
    assert new.topic_id != old.topic_id


def test_creating_an_existing_topic_raises_and_changes_nothing(store):
    first = create(store, "orders", reg(1))

    with pytest.raises(TopicExistsError):
        create(store, "orders", reg(2), reg(2))

    assert store.topic("orders") == (first, {0: reg(1)})


def test_of_two_brokers_creating_a_topic_together_one_wins(open_store):
    stores = [open_store(), open_store()]

    results = in_threads(
        *[lambda s=s, n=n: create(s, "orders", *[reg(n)] * n) for n, s in enumerate(stores, 1)]
    )

    winners = [r for r in results if isinstance(r, TopicMetadata)]
    assert len(winners) == 1
    assert sum(isinstance(r, TopicExistsError) for r in results) == 1
    winner = winners[0]
    assert stores[0].topic("orders") == (
        winner,
        {p: reg(winner.partitions) for p in range(winner.partitions)},
    )


# -- the change feed


def test_each_write_names_what_it_changed(store):
    create(store, "orders", reg(1))
    node = store.register_broker(broker(1), LONG_MS)
    epoch = store.claim_controller(1, node, LONG_MS)
    alice = ClientQuotaEntity.of({"user": "alice"})
    credential = ScramCredential(b"s", b"k", b"v", 4096)
    binding = AclBinding(
        ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL),
        AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
    )
    expected = {
        lambda: create(store, "other", reg(1)): {("topic", "other")},
        lambda: store.set_partitions("orders", 2, {1: reg(1)}): {("topic", "orders")},
        lambda: store.set_topic_configs("orders", {"retention.ms": "1"}): {("topic", "orders")},
        lambda: store.alter_partition("orders", 0, 0, reg(1).with_isr(())): {("topic", "orders")},
        lambda: store.controller_alter_partitions(
            (1, epoch),
            [("orders", 1, 0, reg(1).with_leader(NO_LEADER, ())), ("other", 0, 9, reg(1))],
        ): {("topic", "orders")},
        lambda: store.delete_topic("other"): {("topic", "other")},
        lambda: store.register_broker(broker(2), LONG_MS): {("brokers", "")},
        lambda: store.set_broker_fenced((1, epoch), 1, node, False): {("brokers", "")},
        lambda: store.set_broker_fenced((1, epoch), 1, node, True): {("brokers", "")},
        lambda: store.begin_controlled_shutdown(1, node): {("brokers", "")},
        lambda: store.resign_controller(1, epoch): {("controller", "")},
        lambda: store.claim_controller(2, store.brokers()[2].broker_epoch, LONG_MS): {
            ("controller", "")
        },
        lambda: store.add_acls([binding]): {("acls", "")},
        lambda: store.remove_acls([binding]): {("acls", "")},
        lambda: store.alter_scram_credentials({("alice", "SCRAM-SHA-256"): credential}, []): {
            ("scram", "")
        },
        lambda: store.alter_client_quotas({alice: {"producer_byte_rate": 1.0}}): {("quotas", "")},
        lambda: store.set_broker_configs({"num.partitions": "3"}): {("broker_configs", "")},
        lambda: store.set_finalized_features({"metadata.version": 31}, 1): {("features", "")},
        lambda: store.set_group_configs("g1", {"a": "b"}): {("group_configs", "g1")},
        lambda: store.set_group_configs("g1", {}): {("group_configs", "g1")},
    }
    for write, changes in expected.items():
        assert feed_after(store, write) == changes


def test_writes_that_change_no_shared_state_record_nothing(store):
    node = store.register_broker(broker(1), LONG_MS)
    epoch = store.claim_controller(1, node, LONG_MS)
    create(store, "orders", reg(1))
    store.begin_controlled_shutdown(1, node)

    unrecorded = [
        lambda: store.heartbeat(1, node, LONG_MS),
        lambda: store.renew_controller(1, epoch, LONG_MS),
        lambda: store.allocate_producer_ids(1000),
        lambda: store.delete_topic("missing"),
        lambda: store.set_topic_configs("missing", {}),
        lambda: store.set_partitions("missing", 3, {}),
        lambda: store.set_group_configs("never-configured", {}),
        lambda: store.remove_acls([]),
        lambda: store.begin_controlled_shutdown(1, node),
        lambda: store.set_broker_fenced((1, epoch), 1, node, True),  # fenced since registering
        lambda: store.set_broker_fenced((1, epoch + 1), 1, node, False),  # not the controller
        lambda: store.claim_controller(1, node, LONG_MS),  # held
        lambda: store.resign_controller(1, epoch + 1),
        lambda: store.alter_partition("orders", 0, 7, reg(1)),
        lambda: store.finalized_features({"metadata.version": 30}),
    ]
    store.finalized_features({"metadata.version": 30})
    for write in unrecorded:
        assert feed_after(store, write) == set()


def test_changes_since_a_version_name_each_change_after_it_once(store):
    v0, _ = store.changes_since(0)
    store.set_group_configs("g1", {"a": "1"})
    v1, changes = store.changes_since(v0)
    store.set_group_configs("g2", {"a": "1"})
    store.set_group_configs("g1", {"a": "2"})

    latest, later = store.changes_since(v1)

    assert changes == {("group_configs", "g1")}
    assert later == {("group_configs", "g1"), ("group_configs", "g2")}
    assert store.changes_since(latest) == (latest, set())


def test_a_version_no_longer_kept_asks_for_a_reload_of_everything(open_store):
    store = open_store(kept_changes=10)
    for n in range(30):
        store.set_group_configs(f"g{n}", {"a": "1"})

    latest, changes = store.changes_since(0)

    assert changes == {RELOAD_ALL}
    assert store.changes_since(latest - 1) == (latest, {("group_configs", "g29")})
    assert store.changes_since(latest + 5) == (latest, {RELOAD_ALL})


def test_a_reader_following_the_feed_misses_no_write_of_brokers_writing_together(open_store):
    """Versions are in commit order: a reader that has seen version v has seen every change
    up to v, however the writers' transactions interleave."""
    writers, reader = [open_store(), open_store()], open_store()
    done = threading.Event()
    seen: set = set()

    def follow() -> None:
        version = 0
        while True:
            finished = done.is_set()
            version, changes = reader.changes_since(version)
            seen.update(changes)
            if finished:
                return

    def write(store: PostgresMetadataStore, prefix: str) -> None:
        for n in range(150):
            store.set_group_configs(f"{prefix}{n}", {"a": "1"})

    follower = threading.Thread(target=follow)
    follower.start()
    in_threads(*[lambda s=s, p=p: write(s, p) for s, p in zip(writers, "ab", strict=True)])
    done.set()
    follower.join(WAIT_S)

    assert seen == {("group_configs", f"{p}{n}") for p in "ab" for n in range(150)}


def test_a_change_wakes_a_broker_waiting_for_one(open_store):
    waiter, writer = open_store(), open_store()
    while waiter.wait_for_change(0):
        pass
    woken = []
    thread = threading.Thread(target=lambda: woken.append(waiter.wait_for_change(WAIT_S)))
    thread.start()

    writer.set_broker_configs({"num.partitions": "3"})

    thread.join(WAIT_S)
    assert woken == [True]


def test_a_change_committed_before_the_wait_still_wakes_it(open_store):
    waiter, writer = open_store(), open_store()

    writer.set_broker_configs({"num.partitions": "3"})

    assert waiter.wait_for_change(WAIT_S) is True


def test_a_wait_without_change_times_out(store):
    assert store.wait_for_change(0.01) is False


# -- membership


def test_every_registration_gets_a_greater_broker_epoch(open_store):
    one, two = open_store(), open_store()

    epochs = [one.register_broker(broker(1), LONG_MS), two.register_broker(broker(2), LONG_MS)]
    epochs.append(two.register_broker(broker(1), LONG_MS))
    epochs += in_threads(
        lambda: one.register_broker(broker(3), LONG_MS),
        lambda: two.register_broker(broker(4), LONG_MS),
    )

    assert epochs[:3] == sorted(epochs[:3]) and len(set(epochs)) == 5
    assert min(epochs[3:]) > epochs[2]
    brokers = one.brokers()
    assert brokers[1] == BrokerRegistration(
        1, epochs[2], {"PLAINTEXT": ("127.0.0.1", 9093)}, fenced=True
    )
    assert brokers[2] == BrokerRegistration(
        2, epochs[1], {"PLAINTEXT": ("127.0.0.1", 9094)}, fenced=True
    )


def test_a_registered_broker_is_fenced_until_the_controller_unfences_it(open_store):
    controller_store, member = open_store(), open_store()
    node = controller_store.register_broker(broker(1), LONG_MS)
    controller = (1, controller_store.claim_controller(1, node, LONG_MS))
    member_epoch = member.register_broker(broker(2), LONG_MS)

    assert member.brokers()[2].fenced is True
    assert controller_store.renewed_brokers() == [(1, node), (2, member_epoch)]
    assert controller_store.lapsed_brokers() == []
    # Only the controller's lease unfences.
    assert member.set_broker_fenced((2, controller[1]), 2, member_epoch, False) is False
    assert member.set_broker_fenced((1, controller[1] + 1), 2, member_epoch, False) is False
    assert member.brokers()[2].fenced is True

    assert controller_store.set_broker_fenced(controller, 2, member_epoch, False) is True
    assert controller_store.renewed_brokers() == [(1, node)]
    assert controller_store.set_broker_fenced(controller, 1, node, False) is True
    assert controller_store.renewed_brokers() == []
    assert {n: b.fenced for n, b in member.brokers().items()} == {1: False, 2: False}


def test_a_registration_keeps_endpoints_and_rack_fences_the_broker_and_clears_shutdown(store):
    node = store.register_broker(broker(1), LONG_MS)
    epoch = store.claim_controller(1, node, LONG_MS)
    assert store.set_broker_fenced((1, epoch), 1, node, False) is True
    assert store.begin_controlled_shutdown(1, node) is True
    assert store.brokers()[1] == BrokerRegistration(1, node, broker(1).endpoints, None, False, True)
    registration = BrokerRegistration(
        1, 0, {"PLAINTEXT": ("b1", 9092), "SSL": ("b1", 9093)}, rack="rack-a"
    )

    again = store.register_broker(registration, LONG_MS)

    assert store.brokers() == {
        1: BrokerRegistration(1, again, registration.endpoints, "rack-a", True, False)
    }


def test_a_heartbeat_of_an_older_registration_is_refused(store):
    first = store.register_broker(broker(1), LONG_MS)
    second = store.register_broker(broker(1), LONG_MS)

    assert store.heartbeat(1, first, LONG_MS) is False
    assert store.heartbeat(2, first, LONG_MS) is False
    assert store.heartbeat(1, second, LONG_MS) is True


def test_controlled_shutdown_is_for_the_current_registration_only(store):
    first = store.register_broker(broker(1), LONG_MS)
    second = store.register_broker(broker(1), LONG_MS)

    assert store.begin_controlled_shutdown(1, first) is False
    assert store.brokers()[1].in_controlled_shutdown is False
    assert store.begin_controlled_shutdown(1, second) is True
    assert store.brokers()[1].in_controlled_shutdown is True


def test_a_fenced_broker_whose_lease_lapses_is_not_lapsed(store):
    node = store.register_broker(broker(1), LONG_MS)
    member_epoch = store.register_broker(broker(2), 1)

    # Fenced from its registration: out of renewed_brokers is its lease expired.
    wait_for(lambda: store.renewed_brokers() == [(1, node)], WAIT_S, "broker 2's lease to expire")

    assert store.lapsed_brokers() == []
    assert store.brokers()[2].fenced is True
    assert store.heartbeat(2, member_epoch, LONG_MS) is True
    assert store.renewed_brokers() == [(1, node), (2, member_epoch)]


def test_a_broker_whose_lease_lapses_is_fenced_and_unfenced_when_it_returns(open_store):
    controller_store, member = open_store(), open_store()
    node = controller_store.register_broker(broker(1), LONG_MS)
    controller = (1, controller_store.claim_controller(1, node, LONG_MS))
    member_epoch = member.register_broker(broker(2), LONG_MS)
    assert controller_store.set_broker_fenced(controller, 1, node, False) is True
    assert controller_store.set_broker_fenced(controller, 2, member_epoch, False) is True
    assert controller_store.lapsed_brokers() == []

    assert member.heartbeat(2, member_epoch, 1) is True

    wait_for(lambda: controller_store.lapsed_brokers(), WAIT_S, "a lapsed broker")
    assert controller_store.lapsed_brokers() == [(2, member_epoch)]
    assert controller_store.set_broker_fenced(controller, 2, member_epoch, True) is True
    assert controller_store.lapsed_brokers() == []
    assert controller_store.renewed_brokers() == []

    assert member.heartbeat(2, member_epoch, LONG_MS) is True
    assert controller_store.renewed_brokers() == [(2, member_epoch)]
    assert controller_store.set_broker_fenced(controller, 2, member_epoch, False) is True
    assert controller_store.renewed_brokers() == []
    assert controller_store.brokers()[2].fenced is False


def test_a_fenced_broker_shutting_down_is_not_unfenced(store):
    node = store.register_broker(broker(1), LONG_MS)
    member_epoch = store.register_broker(broker(2), LONG_MS)
    assert store.renewed_brokers() == [(1, node), (2, member_epoch)]

    store.begin_controlled_shutdown(2, member_epoch)

    assert store.renewed_brokers() == [(1, node)]
    assert store.brokers()[2].fenced is True


def test_unfencing_or_fencing_an_older_registration_is_refused(store):
    node = store.register_broker(broker(1), LONG_MS)
    controller = (1, store.claim_controller(1, node, LONG_MS))
    old = store.register_broker(broker(2), LONG_MS)
    current = store.register_broker(broker(2), LONG_MS)

    assert store.set_broker_fenced(controller, 2, old, False) is False
    assert store.brokers()[2].fenced is True
    assert store.set_broker_fenced(controller, 2, current, False) is True
    assert store.set_broker_fenced(controller, 2, old, True) is False
    assert store.brokers()[2].fenced is False


# -- the controller lease


def test_no_controller_until_one_claims(store):
    assert store.controller() == (-1, 0)


def test_only_a_live_broker_at_its_epoch_not_shutting_down_claims_the_controller(open_store):
    store, other = open_store(), open_store()
    assert store.claim_controller(1, 1, LONG_MS) is None  # never registered
    old = store.register_broker(broker(1), LONG_MS)
    node = store.register_broker(broker(1), LONG_MS)
    assert store.claim_controller(1, old, LONG_MS) is None
    lapsed = other.register_broker(broker(2), 1)
    # Fenced from its registration: out of renewed_brokers is its lease expired.
    wait_for(
        lambda: (2, lapsed) not in store.renewed_brokers(), WAIT_S, "broker 2's lease to expire"
    )
    assert other.claim_controller(2, lapsed, LONG_MS) is None
    leaving = other.register_broker(broker(3), LONG_MS)
    assert other.begin_controlled_shutdown(3, leaving) is True
    assert other.claim_controller(3, leaving, LONG_MS) is None
    assert store.controller() == (-1, 0)

    # Fenced, as every broker is until a controller unfences it: it claims all the same.
    assert store.brokers()[1].fenced is True
    epoch = store.claim_controller(1, node, LONG_MS)
    assert store.controller() == (1, epoch) and epoch == 1


def test_a_fenced_broker_back_within_its_lease_claims_the_controller_but_not_one_shutting_down(
    open_store,
):
    store, other = open_store(), open_store()
    node = store.register_broker(broker(1), LONG_MS)
    epoch = store.claim_controller(1, node, LONG_MS)
    returning = other.register_broker(broker(2), 1)
    leaving = other.register_broker(broker(3), LONG_MS)
    # Unfenced: shutting down is all that keeps it from claiming.
    assert store.set_broker_fenced((1, epoch), 3, leaving, False) is True
    assert other.begin_controlled_shutdown(3, leaving) is True
    wait_for(
        lambda: (2, returning) not in store.renewed_brokers(), WAIT_S, "broker 2's lease to expire"
    )
    store.resign_controller(1, epoch)

    assert other.claim_controller(3, leaving, LONG_MS) is None
    assert other.claim_controller(2, returning, LONG_MS) is None
    assert other.heartbeat(2, returning, LONG_MS) is True
    assert other.brokers()[2].fenced is True
    assert other.claim_controller(2, returning, LONG_MS) == epoch + 1
    assert store.controller() == (2, epoch + 1)


def test_of_brokers_claiming_the_controller_together_exactly_one_wins(open_store):
    stores = [open_store() for _ in range(3)]
    epochs = [s.register_broker(broker(n), LONG_MS) for n, s in enumerate(stores, 1)]

    for round_ in range(1, 6):
        results = in_threads(
            *[
                lambda n=n, s=s, e=e: s.claim_controller(n, e, LONG_MS)
                for n, (s, e) in enumerate(zip(stores, epochs, strict=True), 1)
            ]
        )
        winners = [(n, r) for n, r in enumerate(results, 1) if r is not None]
        assert len(winners) == 1 and winners[0][1] == round_
        assert stores[0].controller() == winners[0]
        stores[0].resign_controller(*winners[0])


def test_a_held_lease_is_renewed_by_its_holder_and_claimed_by_none(open_store):
    store, other = open_store(), open_store()
    epoch = store.claim_controller(1, store.register_broker(broker(1), LONG_MS), LONG_MS)
    other_epoch = other.register_broker(broker(2), LONG_MS)

    assert other.claim_controller(2, other_epoch, LONG_MS) is None
    assert store.renew_controller(1, epoch, LONG_MS) is True
    assert store.renew_controller(1, epoch + 1, LONG_MS) is False
    assert other.renew_controller(2, epoch, LONG_MS) is False


def test_a_resigned_lease_is_claimed_at_the_next_epoch(open_store):
    store, other = open_store(), open_store()
    epoch = store.claim_controller(1, store.register_broker(broker(1), LONG_MS), LONG_MS)
    other_epoch = other.register_broker(broker(2), LONG_MS)

    store.resign_controller(2, epoch)  # not its lease: nothing happens
    assert store.controller() == (1, epoch)
    store.resign_controller(1, epoch)
    assert store.controller() == (-1, epoch)

    assert other.claim_controller(2, other_epoch, LONG_MS) == epoch + 1
    assert store.renew_controller(1, epoch, LONG_MS) is False


def test_a_controller_that_lost_its_lease_writes_nothing(open_store):
    stale, successor = open_store(), open_store()
    create(stale, "orders", reg(1, 2))
    stale_node = stale.register_broker(broker(1), LONG_MS)
    stale_epoch = stale.claim_controller(1, stale_node, 1)
    successor_node = successor.register_broker(broker(2), LONG_MS)

    new_epoch = wait_for(
        lambda: successor.claim_controller(2, successor_node, LONG_MS),
        WAIT_S,
        "broker 2 to claim the controller",
    )
    assert successor.set_broker_fenced((2, new_epoch), 2, successor_node, False) is True
    before = successor.changes_since(0)

    assert new_epoch == stale_epoch + 1
    assert stale.set_broker_fenced((1, stale_epoch), 2, successor_node, True) is False
    assert stale.set_broker_fenced((1, stale_epoch), 1, stale_node, False) is False
    assert stale.controller_alter_partitions(
        (1, stale_epoch), [("orders", 0, 0, reg(1, 2).with_leader(2, (2,)))]
    ) == [False]
    assert stale.renew_controller(1, stale_epoch, LONG_MS) is False
    stale.resign_controller(1, stale_epoch)
    assert successor.changes_since(0) == before
    assert successor.controller() == (2, new_epoch)
    assert {n: b.fenced for n, b in successor.brokers().items()} == {1: True, 2: False}
    assert successor.topic("orders")[1] == {0: reg(1, 2)}


def test_the_controller_alters_partitions_at_their_expected_epochs_only(store):
    node = store.register_broker(broker(1), LONG_MS)
    controller = (1, store.claim_controller(1, node, LONG_MS))
    create(store, "orders", reg(1, 2), reg(2, 1))
    moved = reg(1, 2).with_leader(2, (2,))

    applied = store.controller_alter_partitions(
        controller,
        [
            ("orders", 0, 0, moved),
            ("orders", 1, 5, reg(2, 1).with_leader(1, (1,))),
            ("orders", 7, 0, reg(1)),
            ("missing", 0, 0, reg(1)),
        ],
    )

    assert applied == [True, False, False, False]
    assert store.topic("orders")[1] == {0: moved, 1: reg(2, 1)}
    assert moved.leader_epoch == 1 and moved.partition_epoch == 1


# -- the leader's ISR changes


def unfenced(store: PostgresMetadataStore, *nodes: int) -> dict[int, int]:
    """Register `nodes` and have the first of them, as controller, unfence them all; their
    broker epochs by node."""
    epochs = {n: store.register_broker(broker(n), LONG_MS) for n in nodes}
    controller = (nodes[0], store.claim_controller(nodes[0], epochs[nodes[0]], LONG_MS))
    for n, epoch in epochs.items():
        assert store.set_broker_fenced(controller, n, epoch, False)
    return epochs


def test_the_leader_shrinks_and_expands_the_isr(store):
    unfenced(store, 1, 2, 3)
    create(store, "orders", reg(1, 2, 3))
    shrunk = reg(1, 2, 3).with_isr((1, 2))

    assert store.alter_partition("orders", 0, 0, shrunk) == (True, shrunk)
    expanded = shrunk.with_isr((1, 2, 3))
    assert store.alter_partition("orders", 0, 1, expanded) == (True, expanded)
    assert store.topic("orders")[1] == {0: expanded}


def test_an_isr_change_at_a_stale_partition_epoch_is_refused_with_the_current_registration(
    store,
):
    create(store, "orders", reg(1, 2, 3))
    current = reg(1, 2, 3).with_isr((1, 2))
    store.alter_partition("orders", 0, 0, current)

    assert store.alter_partition("orders", 0, 0, reg(1, 2, 3).with_isr((1,))) == (False, current)
    assert store.topic("orders")[1] == {0: current}


def test_a_leader_cannot_change_leadership_or_replicas(store):
    node = store.register_broker(broker(1), LONG_MS)
    controller = (1, store.claim_controller(1, node, LONG_MS))
    original = reg(1, 2, 3)
    create(store, "orders", original)

    for change in [
        original.with_leader(2, (2, 3)),
        PartitionRegistration((1, 2, 3), (1, 2), 2, 0, 1),
        PartitionRegistration((1, 2, 3, 4), (1, 2), 1, 0, 1, adding_replicas=(4,)),
    ]:
        assert store.alter_partition("orders", 0, 0, change) == (False, original)

    # The deposed leader of epoch 0, once the controller moved leadership away.
    moved = original.with_leader(2, (2, 3))
    store.controller_alter_partitions(controller, [("orders", 0, 0, moved)])
    stale_leader = PartitionRegistration((1, 2, 3), (1,), 1, 0, 2)
    assert store.alter_partition("orders", 0, 1, stale_leader) == (False, moved)


def test_the_isr_takes_back_no_broker_fenced_shutting_down_gone_or_registered_anew(
    store, open_store
):
    """KIP-841's INELIGIBLE_REPLICA: the leader's view of the brokers may be older than the
    store's, so the store judges whom an expansion adds."""
    epochs = unfenced(store, 1, 2, 3, 4)
    controller = (1, store.controller()[1])
    current = PartitionRegistration((1, 2, 3, 4, 5, 6), (1,), 1)
    create(store, "orders", current)
    store.set_broker_fenced(controller, 2, epochs[2], True)
    store.begin_controlled_shutdown(3, epochs[3])
    # Broker 6 is registered and unfenced, but its process is gone (its session ended) and
    # the controller has not fenced it yet.
    gone = open_store()
    epochs[6] = gone.register_broker(broker(6), LONG_MS)
    assert store.set_broker_fenced(controller, 6, epochs[6], False)
    gone.close()

    for joining, epoch in [
        (2, epochs[2]),
        (3, epochs[3]),
        (4, epochs[4] - 1),
        (5, -1),
        (6, epochs[6]),
    ]:
        refused = current.with_isr((1, joining))
        assert store.alter_partition("orders", 0, 0, refused, {joining: epoch}) == (
            False,
            current,
        ), joining

    expanded = current.with_isr((1, 4))
    assert store.alter_partition("orders", 0, 0, expanded, {4: epochs[4]}) == (True, expanded)
    # Members already in the ISR are not judged: leaving them in changes nothing.
    store.set_broker_fenced(controller, 4, epochs[4], True)
    kept = expanded.with_isr((1, 4))
    assert store.alter_partition("orders", 0, 1, kept) == (True, kept)


def test_an_isr_change_to_a_missing_partition_finds_none(store):
    create(store, "orders", reg(1))

    assert store.alter_partition("orders", 3, 0, reg(1)) == (False, None)
    assert store.alter_partition("missing", 0, 0, reg(1)) == (False, None)


# -- producer ids


def test_brokers_allocating_producer_ids_together_get_disjoint_blocks(open_store):
    stores = [open_store() for _ in range(3)]

    firsts = in_threads(
        *[lambda s=s: [s.allocate_producer_ids(100) for _ in range(20)] for s in stores]
    )

    blocks = sorted(first for run in firsts for first in run)
    assert blocks == list(range(0, 6000, 100))


# -- losing the database


def terminate_connections(admin: psycopg.Connection, url: str) -> None:
    """End every session on the test's database, as a failover or restart would, and wait
    until they are gone."""
    dbname = url.rsplit("/", 1)[1]
    admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (dbname,)
    )
    wait_for(
        lambda: (
            not admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (dbname,)
            ).fetchone()[0]
        ),
        WAIT_S,
        "the test database's sessions to end",
    )


def test_a_lost_connection_raises_unavailable_and_the_next_call_reconnects(
    store, postgres_url, postgres_admin
):
    create(store, "orders", reg(1))

    terminate_connections(postgres_admin, postgres_url)

    with pytest.raises(MetadataStoreUnavailable):
        store.topic("orders")
    assert store.topic("orders") is not None
    create(store, "payments", reg(1))
    assert set(store.partitions()) == {"orders", "payments"}


def test_a_session_ended_inside_a_transaction_raises_unavailable_and_the_next_call_reconnects(
    open_store, postgres_admin
):
    """What a broker paused mid-write finds when it resumes: PostgreSQL ended its session for
    idling in a transaction (an InternalError, not an OperationalError)."""
    store = open_store(transaction_timeout_ms=100)
    create(store, "orders", reg(1))

    with pytest.raises(MetadataStoreUnavailable), store._transaction() as cur:
        cur.execute("UPDATE fjord_meta_feed SET version = version")
        pid = cur.connection.info.backend_pid
        wait_for(
            lambda: (
                not postgres_admin.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)
                ).fetchone()
            ),
            WAIT_S,
            "PostgreSQL to end the session idle in its transaction",
        )

    assert store.topic("orders") is not None


def test_a_lost_listener_raises_unavailable_then_reports_a_possible_change(
    open_store, postgres_url, postgres_admin
):
    waiter, writer = open_store(), open_store()

    terminate_connections(postgres_admin, postgres_url)

    with pytest.raises(MetadataStoreUnavailable):
        waiter.wait_for_change(WAIT_S)
    # Changes committed while it was away had no one to notify.
    assert waiter.wait_for_change(WAIT_S) is True
    with pytest.raises(MetadataStoreUnavailable):
        writer.set_broker_configs({"num.partitions": "3"})
    writer.set_broker_configs({"num.partitions": "3"})
    assert waiter.wait_for_change(WAIT_S) is True


def test_a_dropped_database_makes_every_call_unavailable(store, postgres_url, postgres_admin):
    dbname = postgres_url.rsplit("/", 1)[1]
    postgres_admin.execute(f'DROP DATABASE "{dbname}" WITH (FORCE)')

    for call in [
        lambda: store.load(None),
        lambda: store.register_broker(broker(1), LONG_MS),
        lambda: store.changes_since(0),
        lambda: store.wait_for_change(WAIT_S),
        lambda: store.wait_for_change(WAIT_S),
    ]:
        with pytest.raises(MetadataStoreUnavailable):
            call()

    with pytest.raises(MetadataStoreUnavailable):
        PostgresMetadataStore(postgres_url)


def test_a_closed_store_refuses_calls(open_store):
    store = open_store()
    store.close()

    with pytest.raises(MetadataStoreUnavailable):
        store.brokers()
    assert store.wait_for_change(WAIT_S) is False


def test_a_broker_whose_process_is_gone_lapses_and_its_controller_lease_is_taken_at_once(
    open_store,
):
    """Every lease here is long: only the liveness lock, freed with the dead broker's
    session, tells that it is gone."""
    dying, survivor = open_store(), open_store()
    dead = dying.register_broker(broker(1), LONG_MS)
    alive = survivor.register_broker(broker(2), LONG_MS)
    epoch = dying.claim_controller(1, dead, LONG_MS)
    assert dying.set_broker_fenced((1, epoch), 1, dead, False) is True
    assert dying.set_broker_fenced((1, epoch), 2, alive, False) is True
    assert survivor.claim_controller(2, alive, LONG_MS) is None  # held by a live broker
    assert survivor.lapsed_brokers() == []
    assert survivor.broker_alive(1) and survivor.broker_alive(2)
    assert not survivor.broker_alive(3)  # never registered
    dying.close()  # the process is gone, its session with it
    wait_for(lambda: survivor.lapsed_brokers() == [(1, dead)], WAIT_S, "broker 1 to lapse")
    assert not survivor.broker_alive(1) and survivor.broker_alive(2)
    assert survivor.claim_controller(2, alive, LONG_MS) == epoch + 1
    assert survivor.controller() == (2, epoch + 1)
