"""Mutated and random request frames sent over real connections to an in-process broker: the
offending connection may be closed, but no handler raises (the connection would log "...
failed" with a traceback), the broker keeps serving a well-behaved client throughout, and its
memory levels off over many rounds."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import struct

import pytest
from fuzz_support import (
    API_VERSIONS,
    BROKER_EXAMPLES,
    FUZZ_SETTINGS,
    TALLY,
    encoded,
    garbage,
    mutated,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from in_process_broker import running_broker
from kafka_requests import req
from raw_client import SIZE, RawClient, api_versions_request, wait_until

SENTINEL = 0x5E5E5E5  # correlation id of the ApiVersions sent behind each fuzzed frame


def corpus(per_api_version: int) -> list[tuple[tuple[int, int], bytes]]:
    """Fuzzed frames (payloads without their size) for every API version, repeatable from run
    to run, and as many too short for a header."""
    frames: list[tuple[tuple[int, int], bytes]] = []

    def collect(pair: tuple[int, int], strategy: st.SearchStrategy[bytes]) -> None:
        @settings(FUZZ_SETTINGS, max_examples=per_api_version)
        @given(strategy)
        def draw(payload):
            frames.append((pair, payload))

        draw()

    for pair in API_VERSIONS:
        # Mostly mutated requests: they reach the handlers more often than random bodies.
        kinds = st.integers(0, 4)
        collect(
            pair, kinds.flatmap(lambda k, p=pair: garbage(*p) if k == 4 else mutated(encoded(*p)))
        )
    collect((-1, -1), st.binary(max_size=12))
    return frames


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def fuzz_round(broker, listener: str, payload: bytes) -> str:
    """Send one fuzzed frame and an ApiVersions behind it; return once the broker has answered
    both, closed the connection, or parked the fuzzed request (a long-poll fetch, a join)."""
    client = await RawClient.open(*broker.bound[listener])
    port = client.writer.get_extra_info("sockname")[1]
    await client.send(SIZE.pack(len(payload)) + payload + api_versions_request(SENTINEL))

    async def answers() -> str:
        try:
            while True:
                frame = await client.read_frame()
                if struct.unpack_from(">i", frame)[0] == SENTINEL:
                    return "answered"
        except (asyncio.IncompleteReadError, ConnectionError):
            return "closed"

    def parked() -> bool:
        for conn in broker.connections:
            if conn.transport.get_extra_info("peername")[1] == port:
                return bool(conn._queue) and not conn._queue[0].done and not conn._backlog
        return False

    reader = asyncio.ensure_future(answers())
    try:
        await wait_until(lambda: reader.done() or parked(), timeout=60, what="the broker")
        return reader.result() if reader.done() else "parked"
    finally:
        reader.cancel()
        client.writer.transport.abort()


async def assert_served(conn) -> None:
    versions = await conn.send(
        req(18, 3, "ApiVersionsRequest", client_software_name="t", client_software_version="1")
    )
    assert versions.error_code == 0
    metadata = await conn.send(
        req(
            3,
            12,
            "MetadataRequest",
            topics=(),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    assert metadata.brokers


# A SASL listener routes frames of unauthenticated connections through the SASL exchange.
@pytest.mark.parametrize("listener", ["PLAINTEXT", "SASL_PLAINTEXT"])
async def test_fuzzed_frames_close_at_most_their_own_connection(tmp_path, caplog, listener):
    # Earlier tests' clients leave futures whose unretrieved errors asyncio logs when they are
    # collected; collect them now so that only this test's errors are counted.
    gc.collect()
    caplog.clear()
    caplog.set_level(logging.WARNING)
    frames = corpus(BROKER_EXAMPLES)
    listeners = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
    async with running_broker(tmp_path, listeners=listeners) as (broker, healthy):
        half = len(frames) // 2
        for i, (pair, payload) in enumerate(frames):
            outcome = await fuzz_round(broker, listener, payload)
            if pair[0] >= 0:
                TALLY.add(pair, f"{listener.lower()}:{outcome}")
            if i % 25 == 0:
                await assert_served(healthy)
            if i == half:
                rss_half = rss()
        await assert_served(healthy)
        await wait_until(lambda: len(broker.connections) == 1, what="fuzzed connections to close")
        growth = rss() - rss_half
    failures = [
        f"{r.name}: {r.getMessage()}\n{r.exc_text or ''}"
        for r in caplog.records
        if r.levelno >= logging.ERROR
    ]
    assert not failures, "\n".join(failures)
    # The second half of the rounds, past the warm-up of caches and lazily built codecs.
    assert growth < 64 * 1024 * 1024, f"RSS grew by {growth} bytes over {len(frames) - half} rounds"
