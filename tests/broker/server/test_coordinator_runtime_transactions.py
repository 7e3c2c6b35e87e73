"""Transactional offset commits through the coordinator runtime of a real in-process broker:
the producer's transactional batch in `__consumer_offsets`, its pending offsets across
restarts and log cleaning, and the markers that end them."""

from __future__ import annotations

import pytest
from in_process_broker import running_broker
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


# Small segments stand in for megabytes of records: the cleaner takes whole segments only.
SMALL_SEGMENTS = {
    "offsets_topic_segment_bytes": "2048",
    "transaction_state_log_segment_bytes": "2048",
}


async def clean(broker) -> int:
    """Run the broker's log cleaner now, in a thread as its background job does."""
    return await broker.run_blocking(broker.log_cleaner.clean_logs)


def offsets_log(broker, group: str):
    return broker.replica_manager.log(OFFSETS_TOPIC, broker.group_coordinator.partition_for(group))


async def _cleaned_with_pending(tmp_path):
    """A partition cleaned while P1 holds offsets of "busy" (one on T0, older than the plain
    commits that follow it, one alone on T1) and P2 one on T2. The cleaner stops at the last
    stable offset, the pending offsets' batch: only the plain commits before it are cleaned."""
    async with running_broker(tmp_path, **SMALL_SEGMENTS) as (b, _):
        for i in range(100):
            await commit(b, "busy", {T0: i})
        await txn_commit(b, "busy", {T0: 500, T1: 500})
        await txn_commit(b, "busy", {T2: 600}, producer_id=P2, epoch=4)
        for i in range(100, 200):
            await commit(b, "busy", {T0: i})
        log_ = offsets_log(b, "busy")
        stable, size = log_.last_stable_offset, log_.size_in_bytes
        assert await clean(b) >= 1
        assert log_.size_in_bytes < size
        kept = batches(b, "busy")
        # Whole segments only: the one holding the LSO and those after it are untouched.
        uncleanable = max(s.base_offset for s in log_.segments if s.base_offset <= stable)
        below = [h for h, rs in kept if h.base_offset < uncleanable and rs]
        assert len(below) == 1  # T0's last commit in the cleaned segments
        restated = {(h.producer_id, h.producer_epoch, h.is_transactional) for h, _ in kept}
        assert {(P1, 0, True), (P2, 4, True)} <= restated
        assert fetch(b, "busy", (T0, T1, T2)) == {T0: 199, T1: -1, T2: -1}
        assert fetch(b, "busy", (T0, T1, T2), stable=True) == dict.fromkeys((T0, T1, T2), UNSTABLE)


async def test_cleaning_keeps_pending_offsets_across_a_restart(tmp_path):
    await _cleaned_with_pending(tmp_path)
    async with running_broker(tmp_path, **SMALL_SEGMENTS) as (b, _):
        assert fetch(b, "busy", (T0, T1, T2)) == {T0: 199, T1: -1, T2: -1}
        assert fetch(b, "busy", (T0, T1, T2), stable=True) == dict.fromkeys((T0, T1, T2), UNSTABLE)


@needs_markers
async def test_markers_after_cleaning_keep_the_newer_plain_commits_and_clean_again(tmp_path):
    await _cleaned_with_pending(tmp_path)
    expected = {T0: 259, T1: 500, T2: -1}
    async with running_broker(tmp_path, **SMALL_SEGMENTS) as (b, _):
        complete(b, "busy", P1, commit=True)
        complete(b, "busy", P2, commit=False, epoch=4)
        assert fetch(b, "busy", (T0, T1, T2), stable=True) == {T0: 199, T1: 500, T2: -1}
        for i in range(200, 260):
            await commit(b, "busy", {T0: i})
        # Nothing is pending any more: the cleaner reaches the transactions' batches. P2's
        # aborted offset goes; of P1's batch only T1's offset stays (T0 has newer commits).
        assert await clean(b) >= 1
        log_ = offsets_log(b, "busy")
        assert log_.last_stable_offset == log_.high_watermark
        kept = batches(b, "busy")
        cleaned = [(h, rs) for h, rs in kept if h.base_offset < log_.active_segment.base_offset]
        assert not [rs for h, rs in cleaned if h.producer_id == P2 and not h.is_control and rs]
        (p1_records,) = [rs for h, rs in cleaned if h.producer_id == P1 and not h.is_control]
        assert len(p1_records) == 1
        assert fetch(b, "busy", (T0, T1, T2), stable=True) == expected
    async with running_broker(tmp_path, **SMALL_SEGMENTS) as (b, _):
        assert fetch(b, "busy", (T0, T1, T2), stable=True) == expected
        assert not b.group_coordinator.offsets.has_pending("busy")


async def test_transaction_state_is_cleaned_and_replays_the_same(tmp_path):
    async with running_broker(tmp_path, **SMALL_SEGMENTS) as (b, _):
        await b.create_topic("data", 1, {})
        rt, tc = b.transaction_runtime, b.transaction_coordinator
        for _ in range(15):
            for tid in ("a", "b"):
                fresh = await b.generate_producer_id()
                init = await rt.run(
                    tid,
                    lambda now, tid=tid, fresh=fresh: tc.init_producer_id(
                        tid, 60_000, -1, -1, fresh, now
                    ),
                )
                assert init.error == ErrorCode.none
                pid, epoch = init.producer_id, init.producer_epoch
                error = await rt.run(
                    tid,
                    lambda now, tid=tid, pid=pid, epoch=epoch: tc.add_partitions(
                        tid, pid, epoch, [("data", 0)], now
                    ),
                )
                assert error == ErrorCode.none
                ended = await rt.run(
                    tid,
                    lambda now, tid=tid, pid=pid, epoch=epoch: tc.end_transaction(
                        tid, pid, epoch, True, now
                    ),
                )
                assert ended.error == ErrorCode.none
        log_ = b.replica_manager.log("__transaction_state", tc.partition_for("a"))
        assert log_.config.compact
        size = log_.size_in_bytes
        assert await clean(b) >= 1
        assert log_.size_in_bytes < size / 2
        state = {
            tid: (m.producer_id, m.producer_epoch, m.state, m.partitions)
            for tid, m in tc.transactions.items()
        }
        assert {tid: s[1:3] for tid, s in state.items()} == {
            "a": (14, state["a"][2]),
            "b": (14, state["b"][2]),
        }
    async with running_broker(tmp_path, **SMALL_SEGMENTS) as (b, _):
        replayed = {
            tid: (m.producer_id, m.producer_epoch, m.state, m.partitions)
            for tid, m in b.transaction_coordinator.transactions.items()
        }
        assert replayed == state
