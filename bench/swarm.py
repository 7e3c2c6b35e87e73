"""python -m bench.swarm BOOTSTRAP TOPIC PARTITIONS {produce|fetch} CONNECTIONS RATE SIZE

The load generator of the busy-clients benchmark: CONNECTIONS client connections, each sending
one small request every 1/RATE seconds (a Produce of one SIZE-byte record with acks=1, or a
Fetch of its partition from offset 0), the way a fleet of services with one producer or
consumer each does. Requests are built once and only their correlation ids change, so the
generator spends its CPU on the sockets, not on encoding.

It speaks to its parent on stdin/stdout: prints `connected` once every connection is open,
starts recording latencies at a `mark` line, and at a `stop` line stops sending, waits for
every answer (at most DRAIN_TIMEOUT_S) and prints one JSON line of results. Sends follow the
schedule, whether or not earlier answers came, so a stalled broker shows in the latencies
instead of slowing the load (no coordinated omission).
"""

from __future__ import annotations

import array
import asyncio
import collections
import json
import math
import resource
import struct
import sys
import time
from datetime import timedelta

import uvloop
from kio.index import load_payload_module
from kio.static.constants import EntityType

from broker.apis.base import build
from broker.protocol import codec
from broker.records.batch import build_batch

PRODUCE_VERSION = 9  # flexible, topic names: served by Fjord and the reference broker alike
FETCH_VERSION = 12
CONNECT_CONCURRENCY = 256
DRAIN_TIMEOUT_S = 60.0
TICK_S = 0.001
NOT_ANSWERED = -1000  # not a Kafka error code: a response without the partition asked for
_CORRELATION = struct.Struct(">i")
_SIZE = struct.Struct(">i")


def _kio(api_key: int, version: int, class_name: str, /, **fields):
    module = load_payload_module(api_key, version, EntityType.request)
    return build(getattr(module, class_name), **fields)


def produce_request(topic: str, partition: int, size: int):
    batch = build_batch([(None, b"x" * size, (), int(time.time() * 1000))])
    v = PRODUCE_VERSION
    data = _kio(0, v, "PartitionProduceData", index=partition, records=batch)
    return _kio(
        0,
        v,
        "ProduceRequest",
        transactional_id=None,
        acks=1,
        timeout=timedelta(seconds=30),
        topic_data=(_kio(0, v, "TopicProduceData", name=topic, partition_data=(data,)),),
    )


def fetch_request(topic: str, partition: int):
    v = FETCH_VERSION
    wanted = _kio(
        1, v, "FetchPartition", partition=partition, fetch_offset=0, partition_max_bytes=1024
    )
    # A consumer's defaults (fetch.min.bytes 1): the partition holds data, so the answer is
    # immediate; with min.bytes 0 the reference broker answers with no partitions at all.
    return _kio(
        1,
        v,
        "FetchRequest",
        max_wait=timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=1024 * 1024,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(_kio(1, v, "FetchTopic", topic=topic, partitions=(wanted,)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def partition_error(payload: bytes, body_prefix: int) -> int:
    """The first partition's error code of a one-topic Produce (v9+) or Fetch (v12+) response;
    `body_prefix` is the bytes before the topic array (Fetch's throttle time, error code and
    session id), whose own error code, if any, wins."""
    pos = 5  # correlation id and the flexible header's empty tagged fields
    if body_prefix:
        top = struct.unpack_from(">h", payload, pos + 4)[0]
        if top:
            return top
        pos += body_prefix
    topics, pos = _uvarint(payload, pos)
    if topics <= 1:  # null or empty: the partition was not answered
        return NOT_ANSWERED
    name_length, pos = _uvarint(payload, pos)
    _, pos = _uvarint(payload, pos + name_length - 1)  # partitions
    return struct.unpack_from(">h", payload, pos + 4)[0]


class Results:
    def __init__(self) -> None:
        self.recording = False
        self.latencies = array.array("d")
        self.sent = 0
        self.answered = 0
        self.errors: collections.Counter[int] = collections.Counter()
        self.closed = 0  # connections the broker closed
        self.lost = 0  # requests on those, never answered

    def summary(self, connections: int, window_s: float) -> dict:
        ordered = sorted(self.latencies)
        return {
            "connections": connections,
            "sent": self.sent,
            "answered": self.answered,
            "errors": {str(code): count for code, count in self.errors.items()},
            "connections_lost": self.closed,
            "requests_lost": self.lost,
            "window_s": window_s,
            "latency_ms": {
                name: _percentile(ordered, percent) * 1000
                for name, percent in (("p50", 50), ("p99", 99), ("p99.9", 99.9), ("max", 100))
            }
            if ordered
            else None,
        }


def _percentile(ordered, percent: float) -> float:
    return ordered[max(1, math.ceil(len(ordered) * percent / 100)) - 1]


class SwarmConnection(asyncio.Protocol):
    """One client: sends a ready-made frame, matches answers to sends in order."""

    def __init__(self, template: bytes, body_prefix: int, results: Results) -> None:
        self.frame = bytearray(template)
        self.body_prefix = body_prefix
        self.results = results
        self.transport: asyncio.Transport | None = None
        self.pending: collections.deque[tuple[float, bool]] = collections.deque()
        self.buffer = bytearray()
        self.correlation = 0
        self.lost = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.lost = True
        self.results.closed += 1
        self.results.lost += len(self.pending)
        self.pending.clear()

    def send(self, now: float) -> None:
        if self.lost:
            return
        self.correlation += 1
        _CORRELATION.pack_into(self.frame, 8, self.correlation)
        self.transport.write(bytes(self.frame))
        self.pending.append((now, self.results.recording))
        self.results.sent += 1

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        now = time.perf_counter()
        results = self.results
        while len(buffer) >= 4:
            size = _SIZE.unpack_from(buffer)[0]
            if len(buffer) < 4 + size:
                break
            payload = bytes(buffer[4 : 4 + size])
            del buffer[: 4 + size]
            sent_at, recorded = self.pending.popleft()
            results.answered += 1
            error = partition_error(payload, self.body_prefix)
            if error:
                results.errors[error] += 1
            if recorded:
                results.latencies.append(now - sent_at)


async def _connect(loop, host: str, port: int, factory, gate: asyncio.Semaphore):
    async with gate:
        for attempt in range(5):
            try:
                _, protocol = await loop.create_connection(factory, host, port)
                return protocol
            except OSError:
                if attempt == 4:
                    raise
                await asyncio.sleep(0.1 * 2**attempt)


async def main(argv: list[str]) -> int:
    bootstrap, topic, partitions, mode, connections, rate, size = argv
    partitions, connections, rate, size = int(partitions), int(connections), float(rate), int(size)
    host, port = bootstrap.rsplit(":", 1)
    # Each connection is a file descriptor; the hard limit is what the machine allows.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    results = Results()
    body_prefix = 0 if mode == "produce" else 10
    templates = []
    for partition in range(partitions):
        request = (
            produce_request(topic, partition, size)
            if mode == "produce"
            else fetch_request(topic, partition)
        )
        payload = codec.encode_request(request, 0, "bench-swarm")
        templates.append(_SIZE.pack(len(payload)) + payload)
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
    clients = await asyncio.gather(
        *(
            _connect(
                loop,
                host,
                int(port),
                lambda i=i: SwarmConnection(templates[i % partitions], body_prefix, results),
                gate,
            )
            for i in range(connections)
        )
    )
    print("connected", flush=True)

    total_rate = connections * rate
    started = time.perf_counter()
    scheduled = 0
    stopping = asyncio.Event()

    def tick() -> None:
        nonlocal scheduled
        now = time.perf_counter()
        due = int((now - started) * total_rate)
        while scheduled < due:
            clients[scheduled % connections].send(now)
            scheduled += 1
        if not stopping.is_set():
            loop.call_later(TICK_S, tick)

    tick()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    marked = stopped = 0.0
    while True:
        line = (await reader.readline()).decode().strip()
        if line == "mark":
            results.recording = True
            marked = time.perf_counter()
        elif line in ("stop", ""):
            stopped = time.perf_counter()
            stopping.set()
            break
    deadline = time.perf_counter() + DRAIN_TIMEOUT_S
    while results.answered + results.lost < results.sent and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    print(json.dumps(results.summary(connections, stopped - marked if marked else 0.0)), flush=True)
    for client in clients:
        client.transport.close()
    return 0


if __name__ == "__main__":
    sys.exit(uvloop.run(main(sys.argv[1:])))
