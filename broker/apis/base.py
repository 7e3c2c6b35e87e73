"""What every request handler gets, and how handlers build version-specific responses."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

if TYPE_CHECKING:
    from broker.server.broker import Broker

NO_THROTTLE = timedelta(0)


@dataclass(frozen=True, slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    listener: str
    principal: str = "User:ANONYMOUS"

    @property
    def response_module(self) -> ModuleType:
        return _response_module(self.api_key, self.api_version)

    def has(self, class_name: str) -> bool:
        """Whether this version's response has the named class (nested parts come and go)."""
        return hasattr(self.response_module, class_name)

    def response(self, class_name: str, **fields: Any) -> Any:
        """An instance of the named response class of this request's version, built from the
        fields of the newest version: fields this version does not have are dropped."""
        return build(getattr(self.response_module, class_name), **fields)


@cache
def _response_module(api_key: int, api_version: int) -> ModuleType:
    return load_payload_module(api_key, api_version, EntityType.response)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: type, **fields: Any) -> Any:
    names = _field_names(cls)
    return cls(**{k: v for k, v in fields.items() if k in names})


Handler = Callable[["Broker", RequestContext, Any], Any | Awaitable[Any]]


@dataclass(frozen=True)
class ApiSpec:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler


class KafkaError(Exception):
    """A request-level failure carrying Kafka's error code."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


def error_name(code: ErrorCode) -> str:
    return code.name.upper()
