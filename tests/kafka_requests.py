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
