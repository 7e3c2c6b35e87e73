"""Transactions: list with state and age, describe, the producers of a partition, and abort a
hanging transaction. Aborting needs the operator role.

A transaction hangs when it stays Ongoing past its timeout: the coordinator aborts expired
transactions, so one that outlives its timeout has a coordinator that lost track of it, or a
partition left with an open transaction the coordinator does not know (KIP-664)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from api import audit, kafka
from api.serializers.errors import errors
from api.serializers.transactions import (
    AbortSerializer,
    PartitionQuerySerializer,
    ProducerStateSerializer,
    TransactionDetailSerializer,
    TransactionQuerySerializer,
    TransactionSerializer,
)
from api.views.base import BrokerViewSet, search
from broker.client import AdminClient, KafkaAdminError
from broker.client.models import TransactionDescription, TransactionListing

TRANSACTIONAL_ID_PATTERN = r"[^/\x00-\x1f\x7f]+"


def with_age(description: TransactionDescription, now_ms: int | None = None) -> dict[str, Any]:
    """The description with the age of its open transaction and whether it hangs."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    start = description.transaction_start_time_ms
    age = max(now_ms - start, 0) if start >= 0 else None
    return {
        **description.__dict__,
        "transaction_start_time_ms": start if start >= 0 else None,
        "age_ms": age,
        "hanging": description.state == "Ongoing"
        and age is not None
        and age > description.transaction_timeout_ms,
    }


def listing_only(listing: TransactionListing) -> dict[str, Any]:
    # Described concurrently with the listing, an id can expire in between.
    return {
        **listing.__dict__,
        "producer_epoch": None,
        "transaction_timeout_ms": None,
        "transaction_start_time_ms": None,
        "age_ms": None,
        "hanging": False,
    }


async def list_with_age(admin: AdminClient, states: list[str]) -> list[dict[str, Any]]:
    listings = await admin.list_transactions(states=states)
    described = await asyncio.gather(
        *(admin.describe_transaction(t.transactional_id) for t in listings),
        return_exceptions=True,
    )
    now_ms = int(time.time() * 1000)
    transactions = []
    for listing, description in zip(listings, described, strict=True):
        if isinstance(description, KafkaAdminError):
            transactions.append(listing_only(listing))
        elif isinstance(description, BaseException):
            raise description
        else:
            transactions.append(with_age(description, now_ms))
    return transactions


class TransactionViewSet(BrokerViewSet):
    """Transactional ids of every coordinator (ListTransactions, DescribeTransactions,
    DescribeProducers, WriteTxnMarkers)."""

    serializer_class = TransactionSerializer
    lookup_field = "transactional_id"
    lookup_value_regex = TRANSACTIONAL_ID_PATTERN

    @extend_schema(
        parameters=[TransactionQuerySerializer],
        responses={200: TransactionSerializer(many=True), **errors()},
    )
    def list(self, request: Request) -> Response:
        query = TransactionQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        states = [q["state"]] if "state" in q else []
        transactions = kafka.call(lambda admin: list_with_age(admin, states))
        transactions = search(transactions, q.get("search"), lambda t: t["transactional_id"])
        if q.get("hanging") is not None:
            transactions = [t for t in transactions if t["hanging"] == q["hanging"]]
        return self.paginated(request, transactions)

    @extend_schema(responses={200: TransactionDetailSerializer, **errors(404)})
    def retrieve(self, request: Request, transactional_id: str) -> Response:
        description = kafka.call(lambda admin: admin.describe_transaction(transactional_id))
        return Response(TransactionDetailSerializer(with_age(description)).data)

    @extend_schema(
        parameters=[PartitionQuerySerializer],
        responses={200: ProducerStateSerializer(many=True), **errors(404)},
    )
    @action(detail=False, pagination_class=None)
    def producers(self, request: Request) -> Response:
        """The producers with state on a partition (DescribeProducers): an open transaction
        shows as its current_transaction_start_offset."""
        query = PartitionQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        topic, partition = query.validated_data["topic"], query.validated_data["partition"]
        producers = kafka.call(lambda admin: admin.describe_producers(topic, partition))
        return Response(ProducerStateSerializer(producers, many=True).data)

    @extend_schema(request=AbortSerializer, responses={200: AbortSerializer, **errors(404, 409)})
    @action(detail=False, methods=["post"])
    def abort(self, request: Request) -> Response:
        """Abort the producer's open transaction on the partition (INVALID_TXN_STATE, 409,
        when it has none there)."""
        serializer = AbortSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        audit.note(
            request,
            resource=f"partition/{d['topic']}-{d['partition']}",
            producer_id=d["producer_id"],
        )
        kafka.call(
            lambda admin: admin.abort_transaction(d["topic"], d["partition"], d["producer_id"])
        )
        return Response(serializer.data)
