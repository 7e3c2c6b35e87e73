"""Build kio requests of any version from the fields of the newest one (test helper)."""

from __future__ import annotations

from datetime import timedelta

from kio.index import load_payload_module
from kio.static.constants import EntityType

from broker.apis.base import build


def request_class(api_key: int, version: int, name: str):
    return getattr(load_payload_module(api_key, version, EntityType.request), name)


def req(api_key: int, version: int, class_name: str, /, **fields):
    return build(request_class(api_key, version, class_name), **fields)


def ms(n: int) -> timedelta:
    return timedelta(milliseconds=n)


PRODUCE_V = 11


def produce_request(
    topic: str, records: bytes | None, *, partition=0, acks=-1, v=PRODUCE_V, transactional_id=None
):
    part = req(0, v, "PartitionProduceData", index=partition, records=records)
    return req(
        0,
        v,
        "ProduceRequest",
        acks=acks,
        timeout=ms(5000),
        transactional_id=transactional_id,
        topic_data=(req(0, v, "TopicProduceData", name=topic, partition_data=(part,)),),
    )


def fetch_request(
    topic_id=None,
    offset=0,
    *,
    topic: str | None = None,
    min_bytes=0,
    max_wait=0,
    max_bytes=1 << 20,
    partition_max_bytes=1 << 20,
    partition=0,
    v=16,
):
    """A sessionless Fetch of one partition, by topic id (v13+) or by name (`topic`, v12-)."""
    part = req(
        1,
        v,
        "FetchPartition",
        partition=partition,
        fetch_offset=offset,
        partition_max_bytes=partition_max_bytes,
        current_leader_epoch=-1,
        log_start_offset=-1,
        last_fetched_epoch=-1,
    )
    fetch_topic = req(1, v, "FetchTopic", topic_id=topic_id, topic=topic, partitions=(part,))
    return req(
        1,
        v,
        "FetchRequest",
        replica_id=-1,
        max_wait=ms(max_wait),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(fetch_topic,),
        forgotten_topics_data=(),
        rack_id="",
    )
