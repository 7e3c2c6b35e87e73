"""Requests the fuzzer found crashing a handler, kept as plain regression tests."""

from __future__ import annotations

import asyncio
import logging
import uuid

from in_process_broker import running_broker
from kafka_requests import fetch_request, req
from kio.schema.errors import ErrorCode
from raw_client import SIZE, RawClient

from broker.protocol import codec


async def test_fetch_by_the_zero_topic_id_is_an_unknown_topic(tmp_path):
    # kio reads the all-zero uuid as None; the handler took that for a v12 topic name.
    async with running_broker(tmp_path) as (broker, conn):
        for version in (13, 17):
            response = await conn.send(fetch_request(uuid.UUID(int=0), v=version))
            [partition] = response.responses[0].partitions
            assert partition.error_code == ErrorCode.unknown_topic_id


async def test_metadata_by_topic_id_before_v12_closes_the_connection(tmp_path, caplog):
    # Ids and null names are v12's; a v10-11 response has no way to answer them.
    some_id = uuid.uuid4()
    async with running_broker(tmp_path) as (broker, conn):
        for version, topic in (
            (10, dict(name=None, topic_id=some_id)),
            (11, dict(name=None, topic_id=None)),
        ):
            request = req(
                3,
                version,
                "MetadataRequest",
                topics=(req(3, version, "MetadataRequestTopic", **topic),),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
            client = await RawClient.open(*broker.bound["PLAINTEXT"])
            payload = codec.encode_request(request, 5)
            await client.send(SIZE.pack(len(payload)) + payload)
            assert await asyncio.wait_for(client.closed_by_broker(), 30)
        v12 = req(
            3,
            12,
            "MetadataRequest",
            topics=(req(3, 12, "MetadataRequestTopic", name=None, topic_id=some_id),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        [topic] = (await conn.send(v12)).topics
        assert topic.error_code == ErrorCode.unknown_topic_id
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
