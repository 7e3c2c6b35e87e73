"""Property tests: a log behaves like a plain list of records, across rolls and reopenings."""

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.records.batch import build_batch, decode_batch, iter_batches, validate_produce_batch
from broker.storage import Log, LogConfig

batch_specs = st.lists(
    st.tuples(
        st.integers(1, 5),  # records in the batch
        st.integers(0, 300),  # value size
        st.integers(0, 5000),  # base timestamp (not monotonic across batches)
        st.integers(0, 4),  # codec
    ),
    min_size=1,
    max_size=40,
)
configs = st.builds(
    LogConfig,
    segment_bytes=st.integers(200, 3000),
    index_interval_bytes=st.integers(0, 800),
    segment_index_bytes=st.integers(8, 200),
)


def model_and_log(directory, specs, config):
    log = Log.open(directory, config)
    model = []  # (offset, value, timestamp)
    for n, (count, size, ts, codec) in enumerate(specs):
        records = [
            (None, bytes([n % 251]) * size + b"%d" % j, [], ts + j * 7) for j in range(count)
        ]
        data = build_batch(records, compression=codec)
        result = log.append(data, validate_produce_batch(data), now_ms=0)
        assert result.base_offset == len(model)
        model += [(len(model) + j, r[1], r[3]) for j, r in enumerate(records)]
    return log, model


def scan(log, start):
    out = []
    offset = start
    while offset < log.log_end_offset:
        fetched = log.read(offset, 700)
        buf = b"".join(bytes(c) for c in fetched.records)
        assert fetched.size == len(buf) > 0
        for pos, h in iter_batches(buf):
            header, records = decode_batch(buf[pos : pos + h.size])
            out += [
                (header.record_offset(r), r.value, header.record_timestamp(r))
                for r in records
                if header.record_offset(r) >= offset
            ]
            offset = h.next_offset
    return out


def check(log, model):
    assert log.log_end_offset == len(model)
    assert scan(log, 0) == model
    for offset in range(0, len(model), 3):
        assert scan(log, offset)[0][0] == offset
    for target in range(-1, 5100, 250):
        want = next(((o, t) for o, _, t in model if t >= target), None)
        assert log.offset_for_timestamp(target) == want
    top = max(t for _, _, t in model)
    assert log.max_timestamp_offset() == next((o, t) for o, _, t in model if t == top)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=batch_specs, config=configs)
def test_log_matches_model_across_reopen_and_recovery(specs, config):
    directory = Path(tempfile.mkdtemp()) / "p-0"
    try:
        log, model = model_and_log(directory, specs, config)
        check(log, model)
        log.close()
        clean = Log.open(directory, config, clean_shutdown=True)
        check(clean, model)
        clean.close()
        recovered = Log.open(directory, config, recovery_point=0, clean_shutdown=False)
        check(recovered, model)
        recovered.close()
    finally:
        shutil.rmtree(directory.parent)
