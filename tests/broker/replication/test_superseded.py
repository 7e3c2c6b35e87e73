"""SupersededLeadership: what other brokers said of partitions this one leads, while the
metadata store does not answer it."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.metadata.cluster import BrokerRegistration, PartitionRegistration
from broker.metadata.image import MetadataImage, TopicMetadata
from broker.records.batch import build_batch, validate_produce_batch
from broker.replication.partition import Partition
from broker.replication.superseded import PeerLeadership, SupersededLeadership
from broker.server.replica_manager import ReplicaManager
from broker.storage import Log, LogConfig, LogManager

TP = ("t", 0)


def leadership(leader: int, epoch: int) -> PeerLeadership:
    return PeerLeadership(leader, epoch, (1, 2, 3), (1, 2))


def test_only_a_newer_epoch_than_the_one_led_here_supersedes_it():
    superseded = SupersededLeadership()
    assert not superseded
    assert superseded.learn(TP, leadership(1, 4))
    assert superseded
    assert superseded.newer_than(TP, 3) == leadership(1, 4)
    assert superseded.newer_than(TP, 4) is None  # led here at that epoch (or later)
    assert superseded.newer_than(TP, 5) is None
    assert superseded.newer_than(("t", 1), 0) is None


def test_the_newest_answer_is_kept_whatever_order_the_brokers_answer_in():
    superseded = SupersededLeadership()
    assert superseded.learn(TP, leadership(2, 6))
    assert not superseded.learn(TP, leadership(1, 5))  # a broker further behind
    assert not superseded.learn(TP, leadership(2, 6))  # the same, from another broker
    assert superseded.newer_than(TP, 3) == leadership(2, 6)
    assert superseded.learn(TP, leadership(1, 7))
    assert superseded.newer_than(TP, 3) == leadership(1, 7)


def test_the_store_answering_again_clears_what_the_brokers_said():
    superseded = SupersededLeadership()
    superseded.learn(TP, leadership(1, 4))
    superseded.clear()
    assert not superseded
    assert superseded.newer_than(TP, 0) is None


# -- in the ReplicaManager: what a partition given up answers -----------------------------------

T0 = 1_700_000_000_000
NODE = 1


@pytest.fixture
def led(tmp_path):
    """A ReplicaManager leading t-0 at epoch 1 (ISR 1, 2), one record written and not yet
    replicated."""
    log = Log.open(tmp_path / "t-0", LogConfig(), high_watermark_follows_appends=False, now_ms=T0)
    data = build_batch([(None, b"v", [], T0)])
    log.append(data, validate_produce_batch(data), now_ms=T0, leader_epoch=1)
    partition = Partition("t", 0, log, NODE, PartitionRegistration((2, 1), (2, 1), 2, 0))
    partition.update(PartitionRegistration((2, 1), (1, 2), NODE, 1, 1), T0)
    image = MetadataImage("cluster")
    image.brokers = {n: BrokerRegistration(n, 1) for n in (1, 2)}
    image.put(TopicMetadata("t", uuid.uuid4(), 1))
    manager = ReplicaManager(
        BrokerConfig({"node.id": str(NODE)}),
        LogManager([tmp_path / "logs"], high_watermark_follows_appends=False),
        image,
    )
    manager.partitions[TP] = partition
    yield manager
    log.close()


def test_a_partition_given_up_refuses_requests_and_ends_its_acks_all_waits(led):
    assert led.lookup(*TP)[1] == ErrorCode.none
    # Not for the epoch it leads at, nor an older one.
    assert not led.supersede(TP, leadership(2, 1))
    assert not led.supersede(TP, leadership(2, 0))
    assert not led.supersede(TP, leadership(NODE, 2))  # elected here again: nothing to give up
    assert led.superseding(TP) is None

    async def scenario() -> ErrorCode:
        loop = asyncio.get_running_loop()
        waiting = asyncio.ensure_future(led.wait_for_replication(TP, 1, 2, loop.time() + 600))
        given_up: list[bool] = []

        def supersede_while_it_waits() -> None:
            # Scheduled after the wait's first step: the record is on this replica alone.
            assert not waiting.done()
            given_up.append(led.supersede(TP, leadership(2, 2)))

        loop.call_soon(supersede_while_it_waits)
        code = await waiting
        assert given_up == [True]
        return code

    assert asyncio.run(scenario()) == ErrorCode.not_leader_or_follower
    assert led.superseding(TP) == leadership(2, 2)
    assert led.lookup(*TP) == (None, ErrorCode.not_leader_or_follower)
    assert not led.supersede(TP, leadership(2, 2))  # no news
    # The store answers again: until it says otherwise, this broker leads as before.
    led.superseded.clear()
    assert led.lookup(*TP)[1] == ErrorCode.none
    assert led.superseding(TP) is None
