"""Connection limits against an in-process broker: max.connections, max.connections.per.ip
(and overrides), connections.max.idle.ms, socket.request.max.bytes, and what one misbehaving
connection can make the broker hold. Each offender loses only its own connection."""

from __future__ import annotations

import asyncio
import os

from in_process_broker import running_broker
from kafka_requests import fetch_request
from raw_client import SIZE, RawClient, api_versions_request, wait_until

from broker.client.connection import BrokerConnection
from broker.protocol.codec import API_VERSIONS_KEY
from broker.protocol.framing import CHUNK


def refused(broker, reason: str) -> float:
    return broker.metrics.connections_refused.labels("PLAINTEXT", reason)._value.get()


def server_side(broker, known: set) -> object:
    """The broker's end of the connection opened after `known` were."""
    [conn] = [c for c in broker.connections if c not in known]
    return conn


async def assert_healthy(broker) -> None:
    """A new, well-behaved client is served."""
    client = await RawClient.open(*broker.bound["PLAINTEXT"])
    try:
        assert await client.api_versions(41) == 41
    finally:
        client.close()


async def test_connection_over_max_connections_per_ip_is_closed_after_accept(tmp_path):
    async with running_broker(tmp_path, max_connections_per_ip="2") as (broker, conn):
        second = await RawClient.open(*broker.bound["PLAINTEXT"])
        assert await second.api_versions() == 7
        third = await RawClient.open(*broker.bound["PLAINTEXT"])
        assert await asyncio.wait_for(third.closed_by_broker(), 30)
        assert refused(broker, "max.connections.per.ip") == 1
        assert broker.connection_quotas.count("127.0.0.1") == 2
        assert await second.api_versions(8) == 8  # the admitted ones are untouched
        second.close()
        await wait_until(lambda: broker.connection_quotas.count("127.0.0.1") == 1)
        await assert_healthy(broker)  # a slot freed is a slot for the next one


async def test_per_ip_overrides_raise_or_lower_the_limit(tmp_path):
    limits = {"max_connections_per_ip": "1", "max_connections_per_ip_overrides": "127.0.0.1:3"}
    async with running_broker(tmp_path, **limits) as (broker, conn):
        clients = [await RawClient.open(*broker.bound["PLAINTEXT"]) for _ in range(2)]
        for i, c in enumerate(clients):
            assert await c.api_versions(i) == i
        fourth = await RawClient.open(*broker.bound["PLAINTEXT"])
        assert await asyncio.wait_for(fourth.closed_by_broker(), 30)
        assert refused(broker, "max.connections.per.ip") == 1
        for c in clients:
            c.close()


async def test_connection_over_max_connections_is_closed_and_counted(tmp_path):
    async with running_broker(tmp_path, max_connections="2") as (broker, conn):
        second = await RawClient.open(*broker.bound["PLAINTEXT"])
        assert await second.api_versions() == 7
        third = await RawClient.open(*broker.bound["PLAINTEXT"])
        assert await asyncio.wait_for(third.closed_by_broker(), 30)
        assert refused(broker, "max.connections") == 1
        assert await second.api_versions(9) == 9
        assert len(broker.connections) == 2


async def test_idle_connection_is_closed_but_a_long_poll_fetch_is_not_idle(tmp_path):
    idle_ms = 1000
    async with running_broker(tmp_path, connections_max_idle_ms=str(idle_ms)) as (broker, conn):
        await broker.create_topic("idle", 1, {})
        silent = await RawClient.open(*broker.bound["PLAINTEXT"])
        # A fetch parked three times the idle timeout is a request in flight, not idleness.
        poller = await BrokerConnection.open(*broker.bound["PLAINTEXT"])
        fetch = fetch_request(topic="idle", min_bytes=1, max_wait=3 * idle_ms, v=12)
        response = await poller.send(fetch)
        assert response.responses[0].partitions[0].error_code == 0
        assert await asyncio.wait_for(silent.closed_by_broker(), 60)
        idle_closed = broker.metrics.connections_idle_closed.labels("PLAINTEXT")._value.get()
        assert idle_closed >= 1
        await poller.close()


async def test_frame_over_socket_request_max_bytes_closes_only_that_connection(tmp_path):
    async with running_broker(tmp_path, socket_request_max_bytes="1024") as (broker, conn):
        for announced in (1025, 2**31 - 1):
            offender = await RawClient.open(*broker.bound["PLAINTEXT"])
            await offender.send(SIZE.pack(announced) + b"\0" * 16)
            assert await asyncio.wait_for(offender.closed_by_broker(), 30)
            await assert_healthy(broker)
        negative = await RawClient.open(*broker.bound["PLAINTEXT"])
        await negative.send(SIZE.pack(-5))
        assert await asyncio.wait_for(negative.closed_by_broker(), 30)
        await assert_healthy(broker)


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def test_announcing_huge_frames_does_not_commit_their_memory(tmp_path):
    # 100 MB is within the default socket.request.max.bytes (100 MiB): Kafka would allocate
    # it; Fjord reserves address space and commits only what arrives.
    announced = 100_000_000
    async with running_broker(tmp_path) as (broker, conn):
        before = rss()
        known = set(broker.connections)
        offenders = []
        for _ in range(4):
            c = await RawClient.open(*broker.bound["PLAINTEXT"])
            await c.send(SIZE.pack(announced) + b"\1" * 100_000)
            offenders.append(c)
        await wait_until(
            lambda: sum(c.decoder._frame is not None for c in broker.connections - known) == 4
        )
        growth = rss() - before
        assert growth < 100_000_000, f"RSS grew by {growth} bytes for 400 MB announced"
        await assert_healthy(broker)
        for c in offenders:
            c.close()


async def test_client_that_never_reads_makes_the_broker_stop_reading(tmp_path):
    requests = 50_000
    async with running_broker(tmp_path) as (broker, conn):
        known = set(broker.connections)
        # A small receive window, so responses back up into the broker quickly.
        client = await RawClient.open(*broker.bound["PLAINTEXT"], receive_buffer=4096)
        await wait_until(lambda: len(broker.connections) == len(known) + 1)
        server = server_side(broker, known)
        frames = [api_versions_request(i) for i in range(requests)]
        client.writer.write(b"".join(frames))  # pipelined; the client never drains its responses

        low, high = server.transport.get_write_buffer_limits()
        await wait_until(
            lambda: server._reading_paused and server.transport.get_write_buffer_size() >= high,
            what="the broker to stop reading",
        )
        handled = broker.metrics.requests.api(API_VERSIONS_KEY, "ApiVersions").requests
        assert handled < requests
        # What the broker holds for it: the write buffer up to one response past its
        # high-water mark, at most one read's worth of undispatched frames, no queued slots.
        largest_response = 1024
        assert server.transport.get_write_buffer_size() < high + largest_response
        assert len(server._backlog) <= CHUNK // min(map(len, frames))
        assert len(server._queue) <= server.max_in_flight
        await assert_healthy(broker)

        # Nothing was dropped: once the client reads, every response comes, in order.
        for i in range(requests):
            assert SIZE.unpack_from(await client.read_frame(), 0)[0] == i
        client.close()


async def test_slow_loris_does_not_block_other_connections(tmp_path):
    async with running_broker(tmp_path) as (broker, conn):
        loris = await RawClient.open(*broker.bound["PLAINTEXT"])
        healthy = await RawClient.open(*broker.bound["PLAINTEXT"])
        request = api_versions_request(99)
        for i, byte in enumerate(request):
            await loris.send(bytes([byte]))
            assert await healthy.api_versions(i) == i
        assert SIZE.unpack_from(await loris.read_frame(), 0)[0] == 99
        loris.close()
        healthy.close()
