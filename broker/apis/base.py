"""What every request handler gets, and how handlers build version-specific responses."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from broker.server.coordinator_log import CoordinatorError

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
    # Set by Fetch for a follower's fetch: replication is not a client, no client quota
    # counts or caps it (Kafka keeps separate replication quotas for it).
    replication: bool = False
    # Whether the response may carry log data as file slices (FileSlice), which the connection
    # sends with sendfile: on sockets without TLS.
    zero_copy: bool = False

    @property
    def user(self) -> str:
        """The principal's name without its type: a quota's user entity (Kafka's
        KafkaPrincipal.getName)."""
        return self.principal.partition(":")[2]

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


@cache
def _throttle_field(cls: type) -> str | None:
    """kio calls it throttle_time (a timedelta), the legacy codecs throttle_time_ms (an int)."""
    if not dataclasses.is_dataclass(cls):
        return None
    return next(
        (f.name for f in dataclasses.fields(cls) if f.name.startswith("throttle_time")), None
    )


def has_throttle_time(response: Any) -> bool:
    return _throttle_field(type(response)) is not None


def throttle_time_ms(response: Any) -> int:
    """The throttle time a handler put in its response (0 if it has none)."""
    name = _throttle_field(type(response))
    if name is None:
        return 0
    value = getattr(response, name)
    return round(value.total_seconds() * 1000) if isinstance(value, timedelta) else int(value)


def with_throttle_time(response: Any, throttle_ms: int) -> Any:
    name = _throttle_field(type(response))
    value = getattr(response, name)
    new = timedelta(milliseconds=throttle_ms) if isinstance(value, timedelta) else throttle_ms
    return dataclasses.replace(response, **{name: new})


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


def answers_coordinator_errors(
    error_response: Callable[[Broker, RequestContext, Any, ErrorCode], Any],
) -> Callable[[Handler], Handler]:
    """For the handler of an API served by the coordinator of one key (a group or
    transactional id): when the coordinator refuses it (NOT_COORDINATOR, a write that could
    not be replicated), the request is answered `error_response(broker, ctx, request, code)`."""

    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def answered(broker, ctx: RequestContext, request) -> Any:
            try:
                return await handler(broker, ctx, request)
            except CoordinatorError as e:
                return error_response(broker, ctx, request, e.code)

        return answered

    return wrap
