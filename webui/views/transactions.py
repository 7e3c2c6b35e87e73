"""Console pages for transactions: the list with ages (hanging ones highlighted), a
transaction's detail, the producers of a partition and aborting a hanging transaction after a
confirmation."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from api import audit
from api.permissions import OPERATOR
from api.serializers.transactions import (
    TRANSACTION_STATES,
    AbortSerializer,
    PartitionQuerySerializer,
)
from api.views.transactions import list_with_age, with_age
from webui.views.base import BrokerCallFailed, broker_call, confirm, paginate, role_required


@role_required()
def transaction_list(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "")
    states = [state] if state in TRANSACTION_STATES else []
    try:
        transactions = broker_call(request, lambda admin: list_with_age(admin, states))
    except BrokerCallFailed:
        transactions = []
    hanging_only = request.GET.get("hanging") == "on"
    if hanging_only:
        transactions = [t for t in transactions if t["hanging"]]
    page, q = paginate(request, transactions, lambda t: t["transactional_id"])
    return render(
        request,
        "webui/transactions/list.html",
        {
            "page": page,
            "q": q,
            "state": state,
            "states": TRANSACTION_STATES,
            "hanging_only": hanging_only,
        },
    )


@role_required()
def transaction_detail(request: HttpRequest, transactional_id: str) -> HttpResponse:
    try:
        description = broker_call(
            request, lambda admin: admin.describe_transaction(transactional_id)
        )
    except BrokerCallFailed:
        return redirect("webui:transaction-list")
    return render(request, "webui/transactions/detail.html", {"txn": with_age(description)})


@role_required()
def transaction_producers(request: HttpRequest) -> HttpResponse:
    """The producers of the partition in the query, each with an abort link when it has a
    transaction open there."""
    producers = None
    errors = {}
    if "topic" in request.GET or "partition" in request.GET:
        query = PartitionQuerySerializer(data=request.GET)
        if query.is_valid():
            topic, partition = query.validated_data["topic"], query.validated_data["partition"]
            try:
                producers = broker_call(
                    request, lambda admin: admin.describe_producers(topic, partition)
                )
            except BrokerCallFailed:
                pass
        else:
            errors = query.errors
    return render(
        request,
        "webui/transactions/producers.html",
        {"form": request.GET, "errors": errors, "producers": producers},
        status=400 if errors else 200,
    )


@role_required(OPERATOR)
def transaction_abort(request: HttpRequest) -> HttpResponse:
    """GET (the abort form's target) confirms; POST writes the ABORT marker."""
    serializer = AbortSerializer(data=request.GET)
    if not serializer.is_valid():
        return render(
            request,
            "webui/transactions/producers.html",
            {"form": request.GET, "errors": serializer.errors, "producers": None},
            status=400,
        )
    d = serializer.validated_data
    back = f"{reverse('webui:transaction-producers')}?" + urlencode(
        {"topic": d["topic"], "partition": d["partition"]}
    )
    if request.method == "POST":
        audit.note(
            request,
            resource=f"partition/{d['topic']}-{d['partition']}",
            producer_id=d["producer_id"],
        )
        try:
            broker_call(
                request,
                lambda admin: admin.abort_transaction(d["topic"], d["partition"], d["producer_id"]),
            )
        except BrokerCallFailed:
            return redirect(back)
        messages.success(
            request,
            f"Aborted the transaction of producer {d['producer_id']} on "
            f"{d['topic']}-{d['partition']}.",
        )
        return redirect(back)
    return confirm(
        request,
        title="Abort transaction",
        message=f"Abort the open transaction of producer {d['producer_id']} on partition "
        f"{d['topic']}-{d['partition']}? Its records there are discarded for read_committed "
        "consumers; a live producer would fail its next commit.",
        action_label="Abort transaction",
        cancel_url=back,
    )
