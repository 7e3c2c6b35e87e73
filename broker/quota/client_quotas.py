"""Client quota configs (KIP-55, KIP-546): which entity has which quota, as Kafka keeps them.

An entity names a user, a client id, both, or an ip; a `None` name is that type's default
entity. The rules are Kafka's ClientQuotaControlManager (validation) and ClientQuotasImage
(describe filters); `resolve` is the precedence of Kafka's DefaultQuotaCallback, which also
decides the metric tags an entity's usage is counted under: a quota on a user is shared by all
of that user's client ids, a default quota applies to each user (or client id) on its own.
Sans-io: the broker stores what `alter` returns and serves what `describe` and `resolve` say.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from broker.addresses import normalise_address

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# Kafka's QuotaConfig: the keys each kind of entity takes, and the largest value of their
# integral types (None: a double).
_LONG, _INT = 2**63 - 1, 2**31 - 1
USER_AND_CLIENT_KEYS: dict[str, int | None] = {
    PRODUCER_BYTE_RATE: _LONG,
    CONSUMER_BYTE_RATE: _LONG,
    REQUEST_PERCENTAGE: None,
    CONTROLLER_MUTATION_RATE: None,
}
IP_KEYS: dict[str, int | None] = {CONNECTION_CREATION_RATE: _INT}

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class InvalidQuota(Exception):
    """INVALID_REQUEST with Kafka's message."""


class UnsupportedEntityType(Exception):
    """UNSUPPORTED_VERSION: a describe filter on an entity type Kafka does not know."""


@dataclass(frozen=True, slots=True)
class ClientQuotaEntity:
    """Entity type -> name (None: the type's default entity), sorted by type."""

    entries: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, mapping: Mapping[str, str | None]) -> ClientQuotaEntity:
        return cls(tuple(sorted(mapping.items())))

    def as_dict(self) -> dict[str, str | None]:
        return dict(self.entries)

    def __str__(self) -> str:
        """As Kafka's ClientQuotaEntity.toString, which its error messages carry."""
        names = (f"{t}={'null' if n is None else n}" for t, n in self.entries)
        return "ClientQuotaEntity(entries={" + ", ".join(names) + "})"


def parse_entity(pairs: Iterable[tuple[str, str | None]]) -> ClientQuotaEntity:
    """The entity of an AlterClientQuotas entry, checked as Kafka's validateEntity and
    configKeysForEntityType; raises InvalidQuota."""
    entity: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in entity:
            raise InvalidQuota(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in ENTITY_TYPES:
            raise InvalidQuota(f"Unhandled client quota entity type: {entity_type}")
        if name == "":
            raise InvalidQuota(f"Empty {entity_type} not supported")
        entity[entity_type] = name
    if not entity:
        raise InvalidQuota("Invalid empty client quota entity")
    if IP in entity:
        if len(entity) > 1:
            raise InvalidQuota(
                "Invalid quota entity combination, IP entity should not be combined with "
                "User or ClientId"
            )
        if entity[IP] is not None and not _is_ip(entity[IP]):
            # Kafka also accepts a host name it can resolve; resolving would block the
            # broker's loop, and a quota is enforced per address anyway.
            raise InvalidQuota(f"{entity[IP]} is not a valid IP or resolvable host.")
    return ClientQuotaEntity.of(entity)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def check_value(entity: ClientQuotaEntity, key: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue; raises InvalidQuota."""
    keys = IP_KEYS if entity.entries[0][0] == IP else USER_AND_CLIENT_KEYS
    if key not in keys:
        raise InvalidQuota(f"Invalid configuration key {key}")
    if not value > 0.0:  # NaN included
        raise InvalidQuota(f"Quota {key} must be greater than 0")
    largest = keys[key]
    if largest is None:
        if value == float("inf"):
            raise InvalidQuota(f"Quota {key} must be finite")
        return
    if value > largest:
        kind = "a LONG" if largest == _LONG else "an INT"
        raise InvalidQuota(f"Proposed value for {key} is too large for {kind}.")
    if abs(value % 1.0) > 1e-6:
        raise InvalidQuota(f"{key} cannot be a fractional value.")


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


def check_filter(components: Iterable[FilterComponent]) -> tuple[dict, set]:
    """Kafka's ClientQuotasImage.describe checks: the exact matches (type -> name or None for
    the default) and the types to match on any name. Raises InvalidQuota or
    UnsupportedEntityType."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for c in components:
        if not c.entity_type:
            raise InvalidQuota("Invalid empty entity type.")
        if c.entity_type in exact or c.entity_type in specified:
            raise InvalidQuota(
                f"Entity type {c.entity_type} cannot appear more than once in the filter."
            )
        if c.entity_type not in ENTITY_TYPES:
            raise UnsupportedEntityType(f"Unsupported entity type {c.entity_type}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise InvalidQuota(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null."
                )
            exact[c.entity_type] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise InvalidQuota(
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                )
            exact[c.entity_type] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise InvalidQuota(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                )
            specified.add(c.entity_type)
        else:
            raise InvalidQuota(f"Unknown match type {c.match_type}")
    named = exact.keys() | specified
    if IP in named and named & {USER, CLIENT_ID}:
        raise InvalidQuota(
            "Invalid entity filter component combination. IP filter component should not be "
            "used with user or clientId filter component."
        )
    return exact, specified


class ClientQuotas:
    """Every entity's quota values, and the lookups enforcement needs."""

    def __init__(self, quotas: Mapping[ClientQuotaEntity, Mapping[str, float]] = {}) -> None:
        self._quotas: dict[ClientQuotaEntity, dict[str, float]] = {
            entity: dict(values) for entity, values in quotas.items() if values
        }
        self._by_key: dict[str, dict[tuple, float]] = {}
        self._index()

    def get(self, entity: ClientQuotaEntity) -> dict[str, float]:
        return dict(self._quotas.get(entity, {}))

    def apply(self, entity: ClientQuotaEntity, changes: Mapping[str, float | None]) -> None:
        """Set (a value) or remove (None) quota keys of one entity."""
        values = self._quotas.setdefault(entity, {})
        for key, value in changes.items():
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value
        if not values:
            del self._quotas[entity]
        self._index()

    def describe(
        self, exact: Mapping[str, str | None], specified: set[str], strict: bool
    ) -> list[tuple[ClientQuotaEntity, dict[str, float]]]:
        """The entities matching a checked filter (Kafka's ClientQuotasImage.matches)."""
        matched = []
        for entity, values in self._quotas.items():
            names = entity.as_dict()
            if strict and len(names) != len(exact) + len(specified):
                continue
            if any(t not in names or names[t] != n for t, n in exact.items()):
                continue
            if any(t not in names for t in specified):
                continue
            matched.append((entity, dict(values)))
        return matched

    # -- enforcement -------------------------------------------------------------------------

    def _index(self) -> None:
        """Per quota key, values by (user part, client-id part) with _ABSENT for a type the
        entity does not name: resolve then looks each precedence level up directly."""
        by_key: dict[str, dict[tuple, float]] = {}
        for entity, values in self._quotas.items():
            names = entity.as_dict()
            shape = (names.get(USER, _ABSENT), names.get(CLIENT_ID, _ABSENT))
            for key, value in values.items():
                if IP in names:
                    # Matched as the connection's address is seen (Kafka keys ip quotas by
                    # InetAddress): 2001:DB8::1 and ::ffff:10.0.0.1 are 2001:db8::1, 10.0.0.1.
                    ip = names[IP] if names[IP] is None else normalise_address(names[IP])
                    by_key.setdefault(key, {})[(ip,)] = value
                else:
                    by_key.setdefault(key, {})[shape] = value
        self._by_key = by_key

    def enabled(self, key: str) -> bool:
        """Whether any entity has this quota: without one nothing is measured (as Kafka)."""
        return key in self._by_key

    @property
    def any_set(self) -> bool:
        """Whether any quota at all is set: every response asks, most brokers have none."""
        return bool(self._by_key)

    def resolve(self, key: str, user: str, client_id: str) -> tuple[tuple[str, str], float | None]:
        """The metric tags (user, client id) this client's usage is counted under, and the
        quota that applies to them (None: unlimited), in Kafka's order of precedence."""
        quotas = self._by_key.get(key, {})
        levels = (
            ((user, client_id), (user, client_id)),
            ((user, None), (user, client_id)),
            ((user, _ABSENT), (user, "")),
            ((None, client_id), (user, client_id)),
            ((None, None), (user, client_id)),
            ((None, _ABSENT), (user, "")),
            ((_ABSENT, client_id), ("", client_id)),
            ((_ABSENT, None), ("", client_id)),
        )
        for shape, tags in levels:
            value = quotas.get(shape)
            if value is not None:
                return tags, value
        return ("", client_id), None

    def ip_connection_rate(self, address: str) -> float | None:
        quotas = self._by_key.get(CONNECTION_CREATION_RATE, {})
        value = quotas.get((address,))
        return quotas.get((None,)) if value is None else value


class _Absent:
    """A type the entity does not name (unlike None, its default entity)."""

    def __repr__(self) -> str:
        return "<absent>"


_ABSENT = _Absent()
