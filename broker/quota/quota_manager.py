"""Quota enforcement (KIP-13, KIP-124, KIP-219, KIP-599, KIP-612): what a client used, and how
long it must wait.

Each quota type keeps one usage measure per metric tags (ClientQuotas.resolve says which), and
nothing at all while no entity has that quota, as Kafka. A response carries the longest throttle
time any of its quotas asks for, and the connection then reads nothing more for that long
(KIP-219: the response goes out at once; a client that honours throttle_time_ms waits by itself,
one that does not is held by the muted connection). Sans-io: callers pass the clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from broker.quota.client_quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotas,
)
from broker.quota.rate import Rate, TokenBucket

PRODUCE, FETCH, REQUEST, CONTROLLER_MUTATION = "produce", "fetch", "request", "controller_mutation"


def monotonic_ms() -> int:
    """The quotas' clock: a wall-clock step must not make a rate look idle or a burst."""
    return int(time.monotonic() * 1000)


# A throttle time is an int32 on the wire.
MAX_THROTTLE_MS = 2**31 - 1

# Kafka's ClientQuotaManager.InactiveSensorExpirationTimeSeconds.
INACTIVE_EXPIRY_MS = 3600 * 1000


@dataclass(slots=True)
class Usage:
    """One metric-tags entity's measure of one quota type, with what throttling it cost."""

    measure: Rate | TokenBucket
    limit: float | None
    last_ms: int
    throttle_ms_total: int = 0
    throttled: int = 0


@dataclass(frozen=True, slots=True)
class UsageSample:
    quota_type: str
    user: str
    client_id: str
    rate: float
    limit: float | None
    throttle_ms_total: int
    throttled: int


class _UsageByTags:
    """Usage per metric tags for one quota type; an entity idle for an hour is forgotten, on
    the recording path too, so that clients cycling through client ids cannot grow it
    without bound (Kafka expires its quota sensors the same way)."""

    quota_type: str

    def __init__(self) -> None:
        self.usage: dict[tuple[str, str], Usage] = {}
        self._next_expiry_ms = 0

    def _expire(self, now_ms: int) -> None:
        if now_ms < self._next_expiry_ms:
            return
        self._next_expiry_ms = now_ms + INACTIVE_EXPIRY_MS // 60
        for tags, usage in list(self.usage.items()):
            if now_ms - usage.last_ms > INACTIVE_EXPIRY_MS:
                del self.usage[tags]

    def samples_now(self, now_ms: int) -> Iterator[UsageSample]:
        self._next_expiry_ms = 0
        self._expire(now_ms)
        for (user, client_id), usage in self.usage.items():
            yield UsageSample(
                self.quota_type,
                user,
                client_id,
                _rate(usage, now_ms),
                usage.limit,
                usage.throttle_ms_total,
                usage.throttled,
            )


class ClientQuotaManager(_UsageByTags):
    """One quota type (produce or fetch bytes, request time) over a sampled Rate."""

    def __init__(
        self,
        quota_type: str,
        key: str,
        samples: int,
        window_ms: int,
        max_throttle_ms: int = MAX_THROTTLE_MS,
    ) -> None:
        super().__init__()
        self.quota_type = quota_type
        self.key = key
        self.samples = samples
        self.window_ms = window_ms
        self.max_throttle_ms = max_throttle_ms

    def record(
        self, configs: ClientQuotas, user: str, client_id: str, value: float, now_ms: int
    ) -> tuple[tuple[str, str] | None, int]:
        """Count `value` for this client; the tags it was counted under (None: not measured)
        and the throttle time its rate now asks for."""
        if not configs.enabled(self.key):
            return None, 0
        self._expire(now_ms)
        tags, limit = configs.resolve(self.key, user, client_id)
        usage = self.usage.get(tags)
        if usage is None:
            usage = self.usage[tags] = Usage(Rate(self.samples, self.window_ms), limit, now_ms)
        usage.limit, usage.last_ms = limit, now_ms
        usage.measure.record(value, now_ms)
        if limit is None:
            return tags, 0
        return tags, min(usage.measure.throttle_ms(limit, now_ms), self.max_throttle_ms)

    def throttled(self, tags: tuple[str, str], throttle_ms: int) -> None:
        usage = self.usage[tags]
        usage.throttle_ms_total += throttle_ms
        usage.throttled += 1


def _rate(usage: Usage, now_ms: int) -> float:
    measure = usage.measure
    if isinstance(measure, Rate):
        return measure.measure(now_ms)
    # A token bucket's "rate" is the credit it has used up: burst - tokens, per burst window.
    return (measure.burst - measure.tokens(now_ms)) * measure.rate / measure.burst


@dataclass(slots=True)
class ControllerMutationQuota:
    """One CreateTopics/CreatePartitions/DeleteTopics request's view of its client's
    controller_mutation_rate (KIP-599). Strict (the versions that know
    THROTTLING_QUOTA_EXCEEDED): a topic is refused once the credits are spent, and admitted
    while there are any, even if its partitions then overdraw them. Permissive (older
    versions): every mutation goes through and the response is throttled. The clock is read
    at each step: the request awaits the store between topics."""

    strict: bool
    usage: Usage | None = None
    throttle_ms: int = field(default=0)

    def exceeded(self) -> bool:
        if not self.strict or self.usage is None:
            return False
        throttle = self.usage.measure.throttle_ms(monotonic_ms())
        self.throttle_ms = min(max(self.throttle_ms, throttle), MAX_THROTTLE_MS)
        return self.throttle_ms > 0

    def record(self, partitions: int) -> None:
        if self.usage is None:
            return
        now_ms = monotonic_ms()
        self.usage.measure.record(partitions, now_ms)
        self.usage.last_ms = now_ms
        if not self.strict:
            self.throttle_ms = min(self.usage.measure.throttle_ms(now_ms), MAX_THROTTLE_MS)


class ControllerMutationQuotaManager(_UsageByTags):
    quota_type = CONTROLLER_MUTATION

    def __init__(self, samples: int, window_ms: int) -> None:
        super().__init__()
        self.samples = samples
        self.window_ms = window_ms

    def quota(
        self, configs: ClientQuotas, user: str, client_id: str, strict: bool, now_ms: int
    ) -> ControllerMutationQuota:
        if not configs.enabled(CONTROLLER_MUTATION_RATE):
            return ControllerMutationQuota(strict)
        self._expire(now_ms)
        tags, limit = configs.resolve(CONTROLLER_MUTATION_RATE, user, client_id)
        if limit is None:
            return ControllerMutationQuota(strict)
        usage = self.usage.get(tags)
        if usage is None:
            bucket = TokenBucket(limit, self.samples, self.window_ms)
            usage = self.usage[tags] = Usage(bucket, limit, now_ms)
        elif usage.limit != limit:
            # A changed quota changes the bucket's rate and burst; the credit spent stays spent.
            usage.measure.reconfigure(limit, now_ms)
            usage.limit = limit
        return ControllerMutationQuota(strict, usage)

    def throttled(self, quota: ControllerMutationQuota) -> None:
        if quota.usage is not None and quota.throttle_ms > 0:
            quota.usage.throttle_ms_total += quota.throttle_ms
            quota.usage.throttled += 1


class ConnectionRateQuotas:
    """connection_creation_rate per client address (KIP-612): a connection over its address's
    rate is not counted, and is closed after the throttle time (at most one window, as
    Kafka's ConnectionQuotas bounds it)."""

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._rates: dict[str, tuple[Rate, int]] = {}  # with the last connection's time
        self.throttled: dict[str, int] = {}  # connections closed, per address
        self._throttled_at: dict[str, int] = {}
        self._next_expiry_ms = 0

    def accept(self, configs: ClientQuotas, address: str, now_ms: int) -> int:
        """0 to accept; else how long to hold the connection before closing it."""
        self._expire(now_ms)
        limit = configs.ip_connection_rate(address)
        if limit is None:
            self._rates.pop(address, None)
            return 0
        rate = self._rates.get(address, (None, 0))[0] or Rate(self.samples, self.window_ms)
        self._rates[address] = (rate, now_ms)
        rate.record(1.0, now_ms)
        throttle = rate.throttle_ms(limit, now_ms)
        if throttle <= 0:
            return 0
        rate.record(-1.0, now_ms)
        self.throttled[address] = self.throttled.get(address, 0) + 1
        self._throttled_at[address] = now_ms
        return min(throttle, self.window_ms)

    def _expire(self, now_ms: int) -> None:
        """Addresses are the clients' to choose: forget those idle past the rate's span (and
        their throttled counts after an hour), every minute."""
        if now_ms < self._next_expiry_ms:
            return
        self._next_expiry_ms = now_ms + INACTIVE_EXPIRY_MS // 60
        span = self.samples * self.window_ms
        self._rates = {a: (r, t) for a, (r, t) in self._rates.items() if now_ms - t <= span}
        self._throttled_at = {
            a: t for a, t in self._throttled_at.items() if now_ms - t <= INACTIVE_EXPIRY_MS
        }
        self.throttled = {a: n for a, n in self.throttled.items() if a in self._throttled_at}


class BrokerQuotas:
    """Every quota type of one broker, over the cluster's quota configs."""

    # Not throttled by request time: authentication (Kafka's SocketServer answers it before
    # KafkaApis) and inter-broker actions: SaslHandshake, SaslAuthenticate, WriteTxnMarkers.
    REQUEST_EXEMPT = frozenset({17, 36, 27})

    def __init__(self, samples: int, window_ms: int, controller_samples: int, controller_ms: int):
        self.configs = ClientQuotas()
        self.produce = ClientQuotaManager(PRODUCE, PRODUCER_BYTE_RATE, samples, window_ms)
        self.fetch = ClientQuotaManager(FETCH, CONSUMER_BYTE_RATE, samples, window_ms)
        self.request = ClientQuotaManager(
            REQUEST, REQUEST_PERCENTAGE, samples, window_ms, max_throttle_ms=window_ms
        )
        self.controller_mutation = ControllerMutationQuotaManager(controller_samples, controller_ms)
        self.connection_rate = ConnectionRateQuotas(samples, window_ms)

    @property
    def request_time_measured(self) -> bool:
        return self.configs.enabled(REQUEST_PERCENTAGE)

    def throttle_ms(
        self,
        api_key: int,
        user: str,
        client_id: str,
        produced_bytes: int,
        fetched_bytes: int,
        request_seconds: float | None,
        now_ms: int,
    ) -> int:
        """Record one request's usage; the throttle time its response carries. The quota that
        asks for the longest wait is the one whose metrics count the throttling, as Kafka."""
        if not self.configs.any_set:
            return 0
        worst: tuple[ClientQuotaManager, tuple[str, str], int] | None = None
        usages = []
        if produced_bytes:
            usages.append((self.produce, produced_bytes))
        if fetched_bytes:
            usages.append((self.fetch, fetched_bytes))
        if request_seconds is not None and api_key not in self.REQUEST_EXEMPT:
            # Kafka counts request time in percent of one thread: 10 ms is 1 percent-second.
            usages.append((self.request, request_seconds * 100))
        for manager, value in usages:
            tags, throttle = manager.record(self.configs, user, client_id, value, now_ms)
            if tags is not None and throttle > 0 and (worst is None or throttle > worst[2]):
                worst = (manager, tags, throttle)
        if worst is None:
            return 0
        manager, tags, throttle = worst
        manager.throttled(tags, throttle)
        return throttle

    def fetch_max_bytes(self, user: str, client_id: str) -> int | None:
        """Kafka's getMaxValueInQuotaWindow: a consumer fetches at most what its quota allows
        in the measured span, so that no single response earns a throttle longer than that
        span (None: no limit)."""
        if not self.configs.enabled(CONSUMER_BYTE_RATE):
            return None
        _, limit = self.configs.resolve(CONSUMER_BYTE_RATE, user, client_id)
        if limit is None:
            return None
        return int(limit * (self.fetch.samples - 1) * self.fetch.window_ms / 1000)

    def samples_now(self, now_ms: int) -> Iterator[UsageSample]:
        for manager in (self.produce, self.fetch, self.request, self.controller_mutation):
            yield from manager.samples_now(now_ms)
