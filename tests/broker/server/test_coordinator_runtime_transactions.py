"""Transactional offset commits through the coordinator runtime of a real in-process broker:
the producer's transactional batch in `__consumer_offsets`, its pending offsets across
restarts and compaction, and the markers that end them."""

from __future__ import annotations

import pytest
from conftest import running_broker
from kio.schema.errors import ErrorCode

from broker.records.batch import decode_batch, iter_batches
from broker.server.coordinator_runtime import OFFSETS_TOPIC
from broker.storage.log import Log
from broker.storage.producer_state import ProducerStateError

P1, P2 = 5000, 5001
T0, T1, T2 = ("t", 0), ("t", 1), ("t", 2)
UNSTABLE = "unstable"

needs_markers = pytest.mark.skipif(
    not hasattr(Log, "append_marker"), reason="Log.append_marker is not there yet"
)


async def txn_commit(broker, group: str, offsets: dict, producer_id: int = P1, epoch: int = 0):
    coordinator = broker.group_coordinator
    return await broker.coordinator_runtime.run_transactional(
        group,
        producer_id,
        epoch,
        lambda now_ms: coordinator.txn_offset_commit(
            group,
            producer_id,
            epoch,
            "",
            -1,
            None,
            {tp: (offset, -1, f"m{offset}") for tp, offset in offsets.items()},
            now_ms,
        ),
    )


async def commit(broker, group: str, offsets: dict):
    from broker.coordinator.offsets import OffsetCommitRequest

    coordinator = broker.group_coordinator
    partitions = [OffsetCommitRequest(t, p, o, metadata=f"m{o}") for (t, p), o in offsets.items()]
    return await broker.coordinator_runtime.run(
        group,
        lambda now_ms: coordinator.commit_offsets(group, "", -1, None, partitions, now_ms, 9),
    )


def fetch(broker, group: str, partitions=(T0, T1), *, stable: bool = False) -> dict:
    error, offsets = broker.group_coordinator.fetch_offsets(
        group, list(partitions), require_stable=stable
    )
    assert error == ErrorCode.none
    return {
        tp: (
            UNSTABLE
            if o is not None and o.error_code == ErrorCode.unstable_offset_commit
            else (o.offset if o is not None else -1)
        )
        for tp, o in offsets.items()
    }


def batches(broker, group: str):
    """Every batch of the group's `__consumer_offsets` partition: (header, records)."""
    log_ = broker.replica_manager.log(OFFSETS_TOPIC, broker.group_coordinator.partition_for(group))
    offset, found = log_.log_start_offset, []
    while offset < log_.log_end_offset:
        data = log_.read(offset, 1 << 20)
        buf = b"".join(bytes(c) for c in data.records)
        for pos, header in iter_batches(buf):
            found.append(decode_batch(buf[pos : pos + header.size]))
            offset = header.next_offset
    return found


def complete(broker, group: str, producer_id: int, commit: bool, epoch: int = 0) -> None:
    broker.coordinator_runtime.complete_transaction(
        broker.group_coordinator.partition_for(group), producer_id, epoch, commit, 0
    )


async def test_a_transactional_commit_is_one_transactional_batch_of_the_producer(broker):
    errors = await txn_commit(broker, "g", {T0: 10, T1: 20}, epoch=3)
    assert errors == {T0: ErrorCode.none, T1: ErrorCode.none}
    header, records = batches(broker, "g")[-1]
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (P1, 3, -1)
    assert header.is_transactional and not header.is_control
    assert len(records) == 2
    assert fetch(broker, "g") == {T0: -1, T1: -1}
    assert fetch(broker, "g", stable=True) == {T0: UNSTABLE, T1: UNSTABLE}


async def test_a_fenced_producer_epoch_is_refused(broker):
    await txn_commit(broker, "g", {T0: 10}, epoch=3)
    with pytest.raises(ProducerStateError) as refused:
        await txn_commit(broker, "g", {T1: 20}, epoch=2)
    assert refused.value.error_code == ErrorCode.invalid_producer_epoch
    assert fetch(broker, "g", stable=True) == {T0: UNSTABLE, T1: -1}


async def test_pending_offsets_survive_a_restart(tmp_path):
    async with running_broker(tmp_path) as (b, _):
        await commit(b, "g", {T0: 1})
        await txn_commit(b, "g", {T0: 10, T1: 20})
    async with running_broker(tmp_path) as (b, _):
        assert fetch(b, "g") == {T0: 1, T1: -1}
        assert fetch(b, "g", stable=True) == {T0: UNSTABLE, T1: UNSTABLE}


@needs_markers
async def test_markers_after_a_restart_end_the_pending_offsets_for_good(tmp_path):
    async with running_broker(tmp_path) as (b, _):
        await commit(b, "g", {T0: 1})
        await txn_commit(b, "g", {T0: 10, T1: 20}, producer_id=P1)
        await txn_commit(b, "g", {T1: 30}, producer_id=P2)
    async with running_broker(tmp_path) as (b, _):
        complete(b, "g", P1, commit=True)
        assert fetch(b, "g", stable=True) == {T0: 10, T1: UNSTABLE}
        complete(b, "g", P2, commit=False)
        assert fetch(b, "g", stable=True) == {T0: 10, T1: 20}
        header, _ = batches(b, "g")[-1]
        assert header.is_control and header.producer_id == P2
    async with running_broker(tmp_path) as (b, _):
        assert fetch(b, "g", stable=True) == {T0: 10, T1: 20}
        assert not b.group_coordinator.offsets.has_pending("g")


async def _compacted_with_pending(tmp_path, monkeypatch):
    """A partition compacted while P1 holds offsets of "busy", one older than the plain
    commits that follow it on T0 and one alone on T1, and P2 one on T2."""
    from broker.server import coordinator_runtime

    monkeypatch.setattr(coordinator_runtime, "COMPACTION_MIN_BYTES", 4096)
    async with running_broker(tmp_path) as (b, _):
        await txn_commit(b, "busy", {T0: 500, T1: 500})
        await txn_commit(b, "busy", {T2: 600}, producer_id=P2, epoch=4)
        for i in range(200):
            await commit(b, "busy", {T0: i})
        log_ = b.replica_manager.log(OFFSETS_TOPIC, b.group_coordinator.partition_for("busy"))
        assert log_.log_start_offset > 0  # compacted
        assert fetch(b, "busy", (T0, T1, T2), stable=True) == dict.fromkeys((T0, T1, T2), UNSTABLE)
        restated = {
            (h.producer_id, h.producer_epoch, h.is_transactional) for h, _ in batches(b, "busy")
        }
        assert {(P1, 0, True), (P2, 4, True)} <= restated


async def test_compaction_keeps_pending_offsets_across_a_restart(tmp_path, monkeypatch):
    await _compacted_with_pending(tmp_path, monkeypatch)
    async with running_broker(tmp_path) as (b, _):
        assert fetch(b, "busy", (T0, T1, T2)) == {T0: 199, T1: -1, T2: -1}
        assert fetch(b, "busy", (T0, T1, T2), stable=True) == dict.fromkeys((T0, T1, T2), UNSTABLE)


@needs_markers
async def test_a_commit_marker_after_compaction_keeps_the_newer_plain_commits(
    tmp_path, monkeypatch
):
    await _compacted_with_pending(tmp_path, monkeypatch)
    async with running_broker(tmp_path) as (b, _):
        complete(b, "busy", P1, commit=True)
        complete(b, "busy", P2, commit=False, epoch=4)
        assert fetch(b, "busy", (T0, T1, T2), stable=True) == {T0: 199, T1: 500, T2: -1}
    async with running_broker(tmp_path) as (b, _):
        assert fetch(b, "busy", (T0, T1, T2), stable=True) == {T0: 199, T1: 500, T2: -1}
        assert not b.group_coordinator.offsets.has_pending("busy")
