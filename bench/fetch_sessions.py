"""Incremental fetch sessions (KIP-227), Fjord only: what one fetch of idle partitions costs,
on the wire and in broker CPU time, as a full fetch and as an incremental one, with 10, 1,000
and 10,000 partitions in the fetch.

Each partition count gets a freshly started broker (`python -m broker`) with one topic of that
many empty partitions. A client in this process sends raw Fetch v17 requests over one
connection (broker/client/connection.py), one at a time, max_wait 0: sessionless full fetches
of every partition (session 0, epoch -1, as a client without sessions sends each time), then,
after the full fetch that creates a session, incremental fetches that name no partition (the
fetcher has nothing to change, the broker nothing to report). Bytes are the frames' sizes
including the 4-byte length; CPU time is the user + system time of the broker's event-loop
thread (/proc/<pid>/task/<pid>/stat) over a run of fetches, divided by their number. Full and incremental runs
alternate over the repetitions; the figures are medians. The broker's open files
(/proc/<pid>/fd) are counted after the runs, against the estimate that decides how many
partitions this machine's open-file limit allows.

KIP-227's claim, and the target here: the incremental figures stay flat as partitions grow
(the same bytes, CPU within TARGET_FLAT_CPU of the smallest session's).
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import struct
from dataclasses import asdict, dataclass, replace
from datetime import timedelta

from kio.index import load_payload_module
from kio.static.constants import EntityType

from bench.brokers import FJORD, BrokerError, create_topics, running
from broker.apis.base import build
from broker.client.connection import BrokerConnection
from broker.protocol import codec

REFERENCE_NOTE = (
    "Fjord only: full against incremental fetches of the same partitions on the same broker, "
    "so these are ratios within Fjord, not against Tansu"
)
FETCH_VERSION = 17
METADATA_VERSION = 12
# Open files per partition: the active segment's log (an empty partition has one segment);
# its indexes hold no descriptor, they are opened only to be written on flush.
FILES_PER_PARTITION = 1
# The broker's own: 18 measured (its log, the metadata store's .sqlite3/-wal/-shm, listener and
# metrics sockets, epoll and wake-up pipes), one socket per client connection, and the files
# that flushes and checkpoints in worker threads hold for a moment.
FILES_SPARE = 256
# Creating 10,000 partitions takes the broker tens of seconds (a directory, files and fsyncs
# each); the admin request may take this long per partition on top of the usual 30 s.
CREATE_S_PER_PARTITION = 0.01
TARGET_FLAT_CPU = 1.5  # incremental CPU per fetch, largest session over smallest
PARTITION_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class FetchSessionPlan:
    partition_counts: tuple[int, ...]
    # Full fetches per run: enough to read `partition_reads` partitions, within these bounds.
    partition_reads: int
    min_full_fetches: int
    max_full_fetches: int
    incremental_fetches: int
    repetitions: int
    timeout_s: float


FULL = FetchSessionPlan(
    partition_counts=(10, 1_000, 10_000),
    partition_reads=400_000,
    min_full_fetches=20,
    max_full_fetches=10_000,
    incremental_fetches=10_000,
    repetitions=3,
    timeout_s=600,
)
QUICK = replace(
    FULL, partition_reads=50_000, min_full_fetches=5, incremental_fetches=2_000, repetitions=1
)


class FetchBenchError(RuntimeError):
    pass


def _kio(api_key: int, version: int, class_name: str, /, **fields):
    module = load_payload_module(api_key, version, EntityType.request)
    return build(getattr(module, class_name), **fields)


def _fetch_request(topic_id, partitions: int, session_id: int, epoch: int):
    v = FETCH_VERSION
    topics = ()
    if partitions:
        fetch_partitions = tuple(
            _kio(
                1,
                v,
                "FetchPartition",
                partition=p,
                fetch_offset=0,
                partition_max_bytes=PARTITION_MAX_BYTES,
            )
            for p in range(partitions)
        )
        topics = (_kio(1, v, "FetchTopic", topic_id=topic_id, partitions=fetch_partitions),)
    return _kio(
        1,
        v,
        "FetchRequest",
        max_wait=timedelta(0),
        min_bytes=0,
        max_bytes=50 * 1024 * 1024,
        isolation_level=0,
        session_id=session_id,
        session_epoch=epoch,
        topics=topics,
        forgotten_topics_data=(),
        rack_id="",
    )


class _Client:
    """Raw frames over one connection, so the bytes on the wire are counted exactly."""

    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn
        self.correlation_id = 1 << 20  # above the ids the connection hands out itself

    def encode(self, request) -> bytes:
        return codec.encode_request(request, 0, "bench-fetch-sessions")

    async def fetch(self, payload: bytes) -> tuple[int, int, object]:
        """(request bytes, response bytes, decoded response) for an encoded Fetch."""
        self.correlation_id += 1
        framed = bytearray(payload)
        struct.pack_into(">i", framed, 4, self.correlation_id)
        raw = await self.conn.send_frame(bytes(framed))
        _, response = codec.decode_response(raw, 1, FETCH_VERSION)
        if response.error_code:
            raise FetchBenchError(f"Fetch failed with error {response.error_code}")
        return 4 + len(framed), 4 + len(raw), response


def _cpu_seconds(pid: int) -> float:
    """The broker's event-loop thread (its main thread): every fetch is handled there, while
    background jobs in other threads (offset checkpoints of thousands of logs) would only
    add noise."""
    with open(f"/proc/{pid}/task/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    utime, stime = int(fields[11]), int(fields[12])  # stat fields 14 and 15
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


async def _full_run(client: _Client, pid: int, payload: bytes, fetches: int, partitions: int):
    request_bytes = response_bytes = 0
    before = _cpu_seconds(pid)
    for _ in range(fetches):
        sent, received, response = await client.fetch(payload)
        carried = sum(len(t.partitions) for t in response.responses)
        if response.session_id != 0 or carried != partitions:
            raise FetchBenchError(f"full fetch carried {carried} of {partitions} partitions")
        request_bytes += sent
        response_bytes += received
    cpu = _cpu_seconds(pid) - before
    return _figures(request_bytes, response_bytes, cpu, fetches)


async def _incremental_run(client: _Client, pid: int, topic_id, partitions: int, fetches: int):
    _, _, created = await client.fetch(client.encode(_fetch_request(topic_id, partitions, 0, 0)))
    session_id = created.session_id
    if not session_id:
        raise FetchBenchError("the broker created no fetch session")
    request_bytes = response_bytes = 0
    # Encoded up front: the client's own work stays out of the measured stretch.
    payloads = [
        client.encode(_fetch_request(topic_id, 0, session_id, epoch))
        for epoch in range(1, fetches + 1)
    ]
    before = _cpu_seconds(pid)
    for payload in payloads:
        sent, received, response = await client.fetch(payload)
        if response.session_id != session_id or response.responses:
            raise FetchBenchError("an idle incremental fetch carried partitions")
        request_bytes += sent
        response_bytes += received
    cpu = _cpu_seconds(pid) - before
    await client.fetch(client.encode(_fetch_request(topic_id, 0, session_id, -1)))  # close
    return _figures(request_bytes, response_bytes, cpu, fetches)


def _figures(request_bytes: int, response_bytes: int, cpu_s: float, fetches: int) -> dict:
    return {
        "fetches": fetches,
        "request_bytes": request_bytes / fetches,
        "response_bytes": response_bytes / fetches,
        "cpu_us": 1e6 * cpu_s / fetches,
    }


async def _measure_point(broker, topic: str, partitions: int, plan: FetchSessionPlan) -> dict:
    host, port = broker.bootstrap.split(":")
    conn = await BrokerConnection.open(host, int(port), client_id="bench-fetch-sessions")
    try:
        metadata = await conn.send(
            _kio(
                3,
                METADATA_VERSION,
                "MetadataRequest",
                topics=(
                    _kio(3, METADATA_VERSION, "MetadataRequestTopic", name=topic, topic_id=None),
                ),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        topic_id = metadata.topics[0].topic_id
        client = _Client(conn)
        pid = broker.process.pid
        full_payload = client.encode(_fetch_request(topic_id, partitions, 0, -1))
        full_fetches = max(
            plan.min_full_fetches, min(plan.max_full_fetches, plan.partition_reads // partitions)
        )
        # Warm-up: imports, caches and the allocator settle before anything is measured.
        await _full_run(client, pid, full_payload, 2, partitions)
        await _incremental_run(client, pid, topic_id, partitions, 100)
        runs: dict[str, list[dict]] = {"full": [], "incremental": []}
        for rep in range(plan.repetitions):
            order = ["full", "incremental"] if rep % 2 == 0 else ["incremental", "full"]
            for kind in order:
                if kind == "full":
                    run = await _full_run(client, pid, full_payload, full_fetches, partitions)
                else:
                    run = await _incremental_run(
                        client, pid, topic_id, partitions, plan.incremental_fetches
                    )
                runs[kind].append(run)
                print(
                    f"  fjord  {partitions:>6,} partitions, {kind:<11} (run {rep + 1}) ... "
                    f"{run['request_bytes']:,.0f} B out, {run['response_bytes']:,.0f} B back, "
                    f"{run['cpu_us']:,.1f} us CPU per fetch over {run['fetches']:,} fetches",
                    flush=True,
                )
        # Counted at the peak: every log open, the bench's connection still up.
        open_files = _open_files(pid)
        print(
            f"  fjord  {partitions:>6,} partitions: {open_files:,} open files in the broker "
            f"(estimate {_open_files_estimate(partitions):,})",
            flush=True,
        )
        medians = {
            kind: {
                key: statistics.median(r[key] for r in samples)
                for key in ("request_bytes", "response_bytes", "cpu_us")
            }
            | {"samples": samples}
            for kind, samples in runs.items()
        }
        return {"open_files": open_files, **medians}
    finally:
        await conn.close()


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _open_files_estimate(partitions: int) -> int:
    return partitions * FILES_PER_PARTITION + FILES_SPARE


def _partition_capacity() -> int:
    """How many partitions one broker process may open here: children inherit this
    process's open-file limit, raised to its hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard == resource.RLIM_INFINITY:
        return 1 << 30
    return max(0, (hard - FILES_SPARE) // FILES_PER_PARTITION)


def measure(plan: FetchSessionPlan) -> dict:
    capacity = _partition_capacity()
    points = {}
    for wanted in plan.partition_counts:
        partitions = wanted
        note = None
        if wanted > capacity:
            partitions = max(10, capacity // 1000 * 1000 or capacity)
            note = (
                f"{wanted:,} partitions need about {_open_files_estimate(wanted):,} open files "
                f"(one per partition and {FILES_SPARE} for the broker's own and its "
                f"connections); this machine's hard limit (ulimit -Hn) is "
                f"{resource.getrlimit(resource.RLIMIT_NOFILE)[1]:,}: measured at "
                f"{partitions:,} instead"
            )
            print(f"  note: {note}", flush=True)
        with running(FJORD) as broker:
            topic = f"bench-fetch-sessions-{partitions}"
            create_topics(
                broker, partitions, [topic], timeout=30 + CREATE_S_PER_PARTITION * partitions
            )
            try:
                point = asyncio.run(
                    asyncio.wait_for(
                        _measure_point(broker, topic, partitions, plan), plan.timeout_s
                    )
                )
            except (FetchBenchError, TimeoutError, ConnectionError) as error:
                broker.check_alive()
                raise FetchBenchError(f"{error}\n{broker.log_tail()}") from error
        estimate = _open_files_estimate(partitions)
        if point["open_files"] > estimate:
            over = (
                f"the broker held {point['open_files']:,} open files with {partitions:,} "
                f"partitions, more than the {estimate:,} the partition capacity assumes"
            )
            print(f"  note: {over}", flush=True)
            note = f"{note}; {over}" if note else over
        points[str(wanted)] = {"partitions": partitions, "note": note, **point}
    smallest, largest = (
        points[str(plan.partition_counts[0])],
        points[str(plan.partition_counts[-1])],
    )

    def wire(point: dict, kind: str) -> float:
        return point[kind]["request_bytes"] + point[kind]["response_bytes"]

    flat_cpu = largest["incremental"]["cpu_us"] / smallest["incremental"]["cpu_us"]
    same_bytes = wire(largest, "incremental") == wire(smallest, "incremental")
    return {
        "points": points,
        "largest": largest["partitions"],
        "bytes_ratio": wire(largest, "full") / wire(largest, "incremental"),
        "cpu_ratio": largest["full"]["cpu_us"] / largest["incremental"]["cpu_us"],
        "incremental_cpu_growth": flat_cpu,
        "incremental_bytes_flat": same_bytes,
        "target_flat_cpu": TARGET_FLAT_CPU,
        "target_met": same_bytes and flat_cpu <= TARGET_FLAT_CPU,
    }


def run(plan: FetchSessionPlan) -> tuple[dict, bool]:
    """The results section for the report, and whether every figure was measured."""
    try:
        figures = measure(plan)
    except (BrokerError, FetchBenchError) as error:
        print(f"\nfjord failed: {error}", flush=True)
        return {"status": f"failed: {str(error).splitlines()[0]}", "plan": asdict(plan)}, False
    return {"status": "ok", "plan": asdict(plan), **figures}, True


def markdown(result: dict) -> str:
    section = result["fetch_sessions"]
    plan = section["plan"]
    lines = [
        f"# Fjord incremental fetch sessions: {result['label']}",
        "",
        f"{result['timestamp']} on {result['machine']['cpus']} CPUs "
        f"({result['machine']['cpu_model']}), Fjord at {result['versions']['fjord_commit']}. "
        f"{REFERENCE_NOTE}. Load average {result['machine']['load_average_1min_at_start']:.2f} "
        "at the start.",
        "",
    ]
    if section["status"] != "ok":
        return "\n".join([*lines, f"fjord: {section['status']}"]) + "\n"
    lines += [
        "One fetch of idle (empty) partitions, Fetch v17, max_wait 0, one request at a time on "
        "one connection, a freshly started broker per partition count. Full: a sessionless "
        "fetch of every partition (session 0, epoch -1). Incremental: a fetch in the session "
        "the first full fetch created, naming no partition. Bytes per fetch include the "
        "4-byte frame length; CPU is the user + system time of the broker's event-loop thread "
        "per fetch over "
        f"a run of fetches (incremental runs: {plan['incremental_fetches']:,} fetches); "
        f"medians of {plan['repetitions']} run(s) of each, in alternating order.",
        "",
        "| partitions | full: request B | full: response B | full: broker CPU (us) "
        "| incremental: request B | incremental: response B | incremental: broker CPU (us) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for point in section["points"].values():
        full, incremental = point["full"], point["incremental"]
        lines.append(
            f"| {point['partitions']:,} | {full['request_bytes']:,.0f} | "
            f"{full['response_bytes']:,.0f} | {full['cpu_us']:,.1f} | "
            f"{incremental['request_bytes']:,.0f} | {incremental['response_bytes']:,.0f} | "
            f"{incremental['cpu_us']:,.1f} |"
        )
        if point["note"]:
            notes.append(point["note"])
    largest = section["largest"]
    verdict = "met" if section["target_met"] else "missed"
    lines += [
        "",
        f"At {largest:,} partitions, full/incremental: **{section['bytes_ratio']:,.0f}x** the "
        f"bytes on the wire (request + response), **{section['cpu_ratio']:,.0f}x** the broker "
        "CPU time per fetch.",
        "",
        f"Incremental fetches stay flat: the same bytes at every size "
        f"({'yes' if section['incremental_bytes_flat'] else 'no'}), broker CPU per fetch at "
        f"{largest:,} partitions {section['incremental_cpu_growth']:.2f}x that at "
        f"{next(iter(section['points'].values()))['partitions']:,} (target <= "
        f"{section['target_flat_cpu']:.1f}x: {verdict}). CPU time is counted in clock ticks, "
        "so a run's figure is exact to about 10 ms over the whole run.",
    ]
    if all("open_files" in point for point in section["points"].values()):
        counts = ", ".join(
            f"{point['open_files']:,} at {point['partitions']:,}"
            for point in section["points"].values()
        )
        lines += [
            "",
            f"Open files of the broker (/proc/<pid>/fd, after the runs): {counts} partitions; "
            f"the partition capacity assumes one per partition plus {FILES_SPARE}.",
        ]
    lines += [f"\nNote: {note}." for note in notes]
    return "\n".join(lines) + "\n"
