from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from api.probes import broker_reachability


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "webui/home.html", {"broker": broker_reachability()})
