import os

from broker.records.batch import build_batch, validate_produce_batch
from broker.storage import LogConfig, LogManager
from broker.storage.checkpoint import read_checkpoint, write_checkpoint
from broker.storage.manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    parse_log_dir_name,
)

CONFIG = LogConfig(segment_bytes=1024, file_delete_delay_ms=0)


def produce(log, count=1, ts=1000):
    data = build_batch([(None, b"v%d" % i, [], ts + i) for i in range(count)])
    return log.append(data, validate_produce_batch(data), now_ms=ts)


def test_parse_log_dir_name():
    assert parse_log_dir_name("orders-0") == ("orders", 0)
    assert parse_log_dir_name("my-dashed-topic-12") == ("my-dashed-topic", 12)
    assert parse_log_dir_name("__consumer_offsets-49") == ("__consumer_offsets", 49)
    assert parse_log_dir_name("noPartition") is None
    assert parse_log_dir_name("topic-x") is None
    assert parse_log_dir_name("-3") is None


def test_checkpoint_file_format(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_checkpoint(path, {("a-b", 0): 10, ("c", 3): 0})
    assert path.read_text() == "0\n2\na-b 0 10\nc 3 0\n"
    assert read_checkpoint(path) == {("a-b", 0): 10, ("c", 3): 0}
    assert read_checkpoint(tmp_path / "absent") == {}
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_create_close_load_clean(tmp_path):
    manager = LogManager([tmp_path / "d1"])
    manager.load(lambda topic: CONFIG)
    log = manager.create("my-topic", 3, CONFIG)
    assert manager.create("my-topic", 3, CONFIG) is log
    for i in range(20):
        produce(log, count=3, ts=i)
    other = manager.create("other", 0, CONFIG)
    produce(other)
    manager.close()
    d1 = tmp_path / "d1"
    assert (d1 / CLEAN_SHUTDOWN_FILE).exists()
    assert read_checkpoint(d1 / RECOVERY_POINT_CHECKPOINT) == {("my-topic", 3): 60, ("other", 0): 1}
    assert read_checkpoint(d1 / LOG_START_OFFSET_CHECKPOINT) == {
        ("my-topic", 3): 0,
        ("other", 0): 0,
    }

    again = LogManager([d1])
    again.load(lambda topic: CONFIG)
    assert not (d1 / CLEAN_SHUTDOWN_FILE).exists()
    assert sorted(tp for tp, _ in again.logs()) == [("my-topic", 3), ("other", 0)]
    reloaded = again.get("my-topic", 3)
    assert reloaded.log_end_offset == 60 and reloaded.recovery_point == 60
    assert again.get("missing", 0) is None
    assert produce(reloaded).base_offset == 60
    again.close()


def test_unclean_load_recovers_a_torn_tail(tmp_path):
    manager = LogManager([tmp_path / "d1"])
    manager.load(lambda topic: CONFIG)
    log = manager.create("t", 0, CONFIG)
    for i in range(5):
        produce(log, count=2, ts=i)
    manager.checkpoint()  # recovery point 0: nothing flushed yet
    active = log.active_segment.log_path
    os.truncate(active, active.stat().st_size - 4)  # the crash tore the last batch
    # No close(): the process "died"; a new manager loads without the clean marker.
    survivor = LogManager([tmp_path / "d1"])
    survivor.load(lambda topic: CONFIG)
    recovered = survivor.get("t", 0)
    assert recovered.log_end_offset == 8
    survivor.close()
    log.close()


def test_placement_uses_the_dir_with_fewest_partitions(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    manager = LogManager(dirs)
    manager.load(lambda topic: CONFIG)
    for p in range(6):
        manager.create("t", p, CONFIG)
    counts = {d.name: sum(1 for e in d.iterdir() if e.is_dir()) for d in dirs}
    assert counts == {"a": 2, "b": 2, "c": 2}
    manager.close()
    again = LogManager(dirs)
    again.load(lambda topic: CONFIG)
    assert len(list(again.logs())) == 6
    again.close()


def test_delete_removes_the_partition(tmp_path):
    manager = LogManager([tmp_path / "d1"])
    manager.load(lambda topic: CONFIG)
    produce(manager.create("gone", 0, CONFIG))
    manager.create("kept", 0, CONFIG)
    manager.delete("gone", 0)
    manager.delete("never-existed", 0)
    assert manager.get("gone", 0) is None
    assert sorted(p.name for p in (tmp_path / "d1").iterdir() if p.is_dir()) == ["kept-0"]
    assert ("gone", 0) not in read_checkpoint(tmp_path / "d1" / RECOVERY_POINT_CHECKPOINT)
    manager.close()
    # A deletion interrupted after the rename is finished at the next load.
    leftover = tmp_path / "d1" / "old-0.0123456789abcdef0123456789abcdef-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"x")
    again = LogManager([tmp_path / "d1"])
    again.load(lambda topic: CONFIG)
    assert not leftover.exists()
    assert [tp for tp, _ in again.logs()] == [("kept", 0)]
    again.close()


def test_retention_flush_and_log_start_offset_persistence(tmp_path):
    configs = {"ret": LogConfig(segment_bytes=512, retention_ms=100, file_delete_delay_ms=0)}
    flushy = LogConfig(flush_interval_ms=1000)
    manager = LogManager([tmp_path / "d1"])
    manager.load(lambda topic: configs.get(topic, flushy))
    ret = manager.create("ret", 0, configs["ret"], now_ms=0)
    for i in range(20):
        produce(ret, count=2, ts=i)
    fl = manager.create("fl", 0, flushy, now_ms=0)
    produce(fl, count=4)
    assert manager.flush_dirty(500) == 0
    assert fl.recovery_point == 0
    assert ret.recovery_point == ret.active_segment.base_offset  # rolled segments get flushed
    assert manager.flush_dirty(1000) == 1
    assert fl.recovery_point == 4
    assert manager.enforce_retention(10_000) > 0
    manager.checkpoint()
    assert ret.log_start_offset == 40
    assert read_checkpoint(tmp_path / "d1" / LOG_START_OFFSET_CHECKPOINT)[("ret", 0)] == 40
    assert fl.delete_records_before(3) == 3
    manager.close()
    again = LogManager([tmp_path / "d1"])
    again.load(lambda topic: configs.get(topic, flushy))
    assert again.get("fl", 0).log_start_offset == 3
    assert again.get("ret", 0).log_start_offset == 40
    again.close()
