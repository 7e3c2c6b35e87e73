"""python -m bench.request_cost [--against REF ...] [--requests N] [--rounds R]

CPU per request of Fjord's own request path, without sockets: an in-process broker, one
connection whose transport keeps nothing, and ready-made one-record Produce frames fed to it
as uvloop would (get_buffer, buffer_updated). What it measures is the Python work a request
costs from its frame to its response's bytes, the part of a busy broker's CPU that changes with
Fjord's code; the busy-clients benchmark (`python -m bench --busy`) measures the whole.

With --against, each round measures this tree and each REF (exported as
`python -m bench --against` does), in an order rotating round by round, so that both see the
same machine; the medians and their ratios are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench.brokers import REPO_DIR, fjord_at

# Runs in the measured revision's tree: imports only `broker` (and kio), which every revision
# has, never `bench`, which an older one may lack.
PROBE = r"""
import asyncio, json, struct, sys, tempfile, time
from datetime import timedelta

from kio.index import load_payload_module
from kio.static.constants import EntityType

from broker.apis.base import build
from broker.config import BrokerConfig
from broker.protocol import codec
from broker.records.batch import build_batch
from broker.server.broker import Broker
from broker.server.connection import KafkaConnection

PARTITIONS = 16


def kio(key, version, class_name, /, **fields):
    module = load_payload_module(key, version, EntityType.request)
    return build(getattr(module, class_name), **fields)


def produce_frame(partition):
    batch = build_batch([(None, b"x" * 100, (), int(time.time() * 1000))])
    data = kio(0, 9, "PartitionProduceData", index=partition, records=batch)
    request = kio(
        0, 9, "ProduceRequest", transactional_id=None, acks=1, timeout=timedelta(seconds=30),
        topic_data=(kio(0, 9, "TopicProduceData", name="t", partition_data=(data,)),),
    )
    payload = codec.encode_request(request, 7, "bench")
    return struct.pack(">i", len(payload)) + payload


class Discard:
    def get_extra_info(self, name):
        return ("127.0.0.1", 1) if name == "peername" else None

    def write(self, data):
        pass

    def writelines(self, parts):
        pass

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def close(self):
        pass


async def main(requests):
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": tempfile.mkdtemp(prefix="bench-request-cost-"),
        "metrics.listener": "",
    }
    broker = Broker(BrokerConfig(props))
    await broker.start()
    try:
        await broker.create_topic("t", PARTITIONS, {})
        connection = KafkaConnection(broker, "PLAINTEXT", broker.listener_security["PLAINTEXT"])
        connection.connection_made(Discard())
        frames = [produce_frame(p) for p in range(PARTITIONS)]

        def feed(frame):
            connection.get_buffer(len(frame))[: len(frame)] = frame
            connection.buffer_updated(len(frame))

        for i in range(2_000):  # warm-up: caches, the allocator, compiled writers
            feed(frames[i % PARTITIONS])
        started = time.process_time()
        for i in range(requests):
            feed(frames[i % PARTITIONS])
        return (time.process_time() - started) / requests
    finally:
        await broker.stop()


print(json.dumps({"produce_us": 1e6 * asyncio.run(main(int(sys.argv[1])))}))
"""


def measure(tree: Path, requests: int) -> float:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(requests)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode:
        raise RuntimeError(f"measuring {tree} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.splitlines()[-1])["produce_us"]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.request_cost", description=__doc__)
    parser.add_argument("--against", action="append", default=[], metavar="REF")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trees = {"this tree": REPO_DIR} | {ref: fjord_at(ref).cwd for ref in args.against}
    samples: dict[str, list[float]] = {name: [] for name in trees}
    names = list(trees)
    for round_ in range(args.rounds):
        # The order rotates, as the core benchmark's: a fixed one showed this tree 10 % slower
        # than an export of the same revision.
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            cost = measure(trees[name], args.requests)
            samples[name].append(cost)
            print(
                f"round {round_ + 1}: {name:<12} {cost:7.1f} us per one-record Produce", flush=True
            )
    here = statistics.median(samples["this tree"])
    print()
    for name, values in samples.items():
        median = statistics.median(values)
        ratio = "" if name == "this tree" else f"  (this tree / {name}: {here / median:.2f})"
        print(f"{name:<12} median {median:7.1f} us{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
