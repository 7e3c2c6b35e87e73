"""Request generators for fuzzing: valid requests of every advertised API and version (kio's
schemas, or the legacy codecs for the versions kio has no schema for), and mutations of them.

`make test` runs a bounded session; `make fuzz` sets FJORD_FUZZ_EXAMPLES higher and reports
what was tried. Examples are derandomized and no database is kept, so a run is repeatable.
"""

from __future__ import annotations

import os
import struct
from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from broker.apis.registry import API_SPECS
from broker.protocol import codec, legacy

# Examples per (API, version) and per kind of test; make fuzz raises it.
EXAMPLES = int(os.environ.get("FJORD_FUZZ_EXAMPLES", "8"))
# Fuzzed frames per (API, version) sent to an in-process broker over real connections.
BROKER_EXAMPLES = int(os.environ.get("FJORD_FUZZ_BROKER_EXAMPLES", "2"))

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)

# Hypothesis imports its flatmap strategy on first use, and pytest compiles that module then.
# CPython 3.11.7's compiler can fail there ("AST constructor recursion depth mismatch")
# when it runs deep inside a test; at collection it runs at the top of the stack.
st.integers().flatmap(st.just)

API_VERSIONS = [
    (spec.key, version)
    for spec in API_SPECS.values()
    for version in range(spec.min_version, spec.max_version + 1)
]


def api_id(pair: tuple[int, int]) -> str:
    key, version = pair
    return f"{API_SPECS[key].name}-v{version}"


# Records are raw bytes to the codec; a fuzzer may put anything there.
st.register_type_strategy(Records, st.binary(max_size=256).map(Records))

_i16 = st.integers(-(2**15), 2**15 - 1)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)
_name = st.text(max_size=24)
_records = st.none() | st.binary(max_size=256)


def _small_tuple(element: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(element, max_size=3).map(tuple)


def _legacy_request(key: int, version: int) -> st.SearchStrategy:
    if key == legacy.PRODUCE:
        part = st.builds(legacy.ProducePartition, _i32, _records)
        topic = st.builds(legacy.ProduceTopic, _name, _small_tuple(part))
        return st.builds(legacy.ProduceRequest.at(version), _i16, _i32, _small_tuple(topic))
    if key == legacy.FETCH:
        part = st.builds(legacy.FetchPartition, _i32, _i64, _i32)
        topic = st.builds(legacy.FetchTopic, _name, _small_tuple(part))
        max_bytes = _i32 if version >= 3 else st.just(legacy.NO_MAX_BYTES)  # v3+ only
        return st.builds(
            legacy.FetchRequest.at(version), _i32, _i32, _i32, _small_tuple(topic), max_bytes
        )
    part = st.builds(legacy.ListOffsetsPartition, _i32, _i64, _i32)
    topic = st.builds(legacy.ListOffsetsTopic, _name, _small_tuple(part))
    return st.builds(legacy.ListOffsetsRequest.at(version), _i32, _small_tuple(topic))


def valid_request(key: int, version: int) -> st.SearchStrategy:
    if legacy.is_legacy(key, version):
        return _legacy_request(key, version)
    return st.from_type(codec.request_schema(key, version))


def encoded(key: int, version: int) -> st.SearchStrategy[bytes]:
    """A valid request frame payload (header and body, no size prefix)."""
    return st.tuples(valid_request(key, version), _i32).map(
        lambda pair: codec.encode_request(pair[0], pair[1], "fuzz")
    )


_BOUNDARIES = [struct.pack(">h", v) for v in (-1, 0, 1, 0x7FFF, -0x8000)] + [
    struct.pack(">i", v) for v in (-1, 0, 1, 0x7FFFFFFF, -0x80000000, 0x10000)
]


@st.composite
def mutated(draw, payload_strategy: st.SearchStrategy[bytes]) -> bytes:
    """A valid payload with one to four edits after its api key and version: bytes flipped,
    boundary integers written over length fields, bytes cut, inserted or appended."""
    data = bytearray(draw(payload_strategy))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "boundary", "truncate", "insert", "delete", "extend"]))
        pos = draw(st.integers(4, max(4, len(data))))
        if op == "flip" and pos < len(data):
            data[pos] ^= draw(st.integers(1, 255))
        elif op == "boundary":
            data[pos : pos + 4] = draw(st.sampled_from(_BOUNDARIES))
        elif op == "truncate":  # counted from the end: small cuts leave most fields whole
            del data[max(4, len(data) - draw(st.integers(1, 8))) :]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
        else:
            data += draw(st.binary(min_size=1, max_size=64))
    return bytes(data)


def garbage(key: int, version: int) -> st.SearchStrategy[bytes]:
    """A header naming (key, version) followed by random bytes."""
    head = struct.pack(">hh", key, version)
    # At least a correlation id and a client id length: shorter is a header-less frame.
    return st.binary(min_size=6, max_size=200).map(lambda tail: head + tail)


class Tally:
    """What a session tried, for `make fuzz`'s report: per (API, version), examples decoded,
    refused with DecodeError, and sent to a broker."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def add(self, pair: tuple[int, int], outcome: str) -> None:
        self.counts[(api_id(pair), outcome)] += 1

    def report(self) -> list[str]:
        if not self.counts:
            return []
        apis = sorted({a for a, _ in self.counts})
        outcomes = sorted({o for _, o in self.counts})
        lines = [
            f"fuzzed {len({a.rsplit('-v', 1)[0] for a in apis})} APIs, {len(apis)} API versions, "
            f"{sum(self.counts.values())} inputs ("
            + ", ".join(
                f"{o}: {sum(n for (_, oo), n in self.counts.items() if oo == o)}" for o in outcomes
            )
            + f"); FJORD_FUZZ_EXAMPLES={EXAMPLES}, FJORD_FUZZ_BROKER_EXAMPLES={BROKER_EXAMPLES}"
        ]
        if os.environ.get("FJORD_FUZZ_REPORT"):
            width = max(map(len, apis))
            lines.append(f"{'API version':<{width}}  " + "  ".join(f"{o:>10}" for o in outcomes))
            for a in apis:
                row = "  ".join(f"{self.counts[(a, o)]:>10}" for o in outcomes)
                lines.append(f"{a:<{width}}  {row}")
        return lines


TALLY = Tally()
