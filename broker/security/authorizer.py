"""Kafka's StandardAuthorizer rules over an in-memory index of ACL bindings.

A request is allowed when its principal is a super user, or when some ALLOW binding applies
and no DENY binding does. Bindings apply by resource (the literal name, the literal wildcard
`*`, or any PREFIXED pattern the name starts with), principal (exact or `User:*`), host (exact
or `*`) and operation. When no binding exists for the resource at all,
`allow.everyone.if.no.acl.found` decides."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from broker.security.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
)
from broker.security.operations import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

_O = AclOperation
# Only ALLOW bindings imply: a DENY of READ does not deny DESCRIBE.
_IMPLIED_BY = {
    _O.DESCRIBE: frozenset({_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER}),
    _O.DESCRIBE_CONFIGS: frozenset({_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}),
}

# authorize_by_resource_type first asks about a name no ACL is likely to mention, so super
# users and allow.everyone.if.no.acl.found pass as they do in Kafka.
_PROBE_NAME = "hardcode"


def parse_super_users(value: str | None) -> frozenset[str]:
    """`super.users`: principals separated by semicolons."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


class StandardAuthorizer:
    def __init__(
        self,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        acls: Iterable[AclBinding] = (),
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._all: set[AclBinding] = set()
        # (resource type, pattern type, name) -> bindings: a request looks up its literal
        # name, the wildcard, and only the prefix lengths some PREFIXED binding has.
        self._by_pattern: dict[tuple[ResourceType, PatternType, str], set[AclBinding]] = {}
        self._prefix_lengths: dict[ResourceType, Counter[int]] = {}
        self.add(acls)

    # -- the ACL set -------------------------------------------------------------------------

    def add(self, bindings: Iterable[AclBinding]) -> None:
        for b in bindings:
            if b in self._all:
                continue
            self._all.add(b)
            p = b.pattern
            key = (p.resource_type, p.pattern_type, p.name)
            self._by_pattern.setdefault(key, set()).add(b)
            if p.pattern_type is PatternType.PREFIXED:
                self._prefix_lengths.setdefault(p.resource_type, Counter())[len(p.name)] += 1

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        for b in bindings:
            if b not in self._all:
                continue
            self._all.discard(b)
            p = b.pattern
            key = (p.resource_type, p.pattern_type, p.name)
            self._by_pattern[key].discard(b)
            if not self._by_pattern[key]:
                del self._by_pattern[key]
            if p.pattern_type is PatternType.PREFIXED:
                lengths = self._prefix_lengths[p.resource_type]
                lengths[len(p.name)] -= 1
                if not lengths[len(p.name)]:
                    del lengths[len(p.name)]

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self._all if acl_filter.matches(b)]

    # -- decisions ---------------------------------------------------------------------------

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        found_resource_acls = False
        allowed = False
        for b in self._applicable(resource_type, name):
            found_resource_acls = True
            entry = b.entry
            if entry.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if entry.host not in (host, WILDCARD_HOST):
                continue
            if entry.permission_type is AclPermissionType.DENY:
                if entry.operation in (_O.ALL, operation):
                    return False
            elif entry.operation is _O.ALL or entry.operation in _IMPLIED_BY.get(
                operation, (operation,)
            ):
                allowed = True
        if not found_resource_acls:
            return self.allow_everyone_if_no_acl_found
        return allowed

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether some resource of the type allows the operation (Kafka's
        authorizeByResourceType, which InitProducerId uses for idempotent producers): an ALLOW
        binding for the principal that no DENY binding covers entirely."""
        if self.authorize(principal, host, operation, resource_type, _PROBE_NAME):
            return True
        allow: list[tuple[PatternType, str]] = []
        deny_literal: set[str] = set()
        deny_prefixes: list[str] = []
        for b in self._all:
            entry, p = b.entry, b.pattern
            if p.resource_type is not resource_type:
                continue
            if entry.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if entry.host not in (host, WILDCARD_HOST) or entry.operation not in (
                _O.ALL,
                operation,
            ):
                continue
            if entry.permission_type is AclPermissionType.ALLOW:
                allow.append((p.pattern_type, p.name))
            elif p.pattern_type is PatternType.LITERAL:
                deny_literal.add(p.name)
            else:
                deny_prefixes.append(p.name)
        if WILDCARD_RESOURCE in deny_literal:
            return False
        for pattern_type, name in allow:
            if any(name.startswith(prefix) for prefix in deny_prefixes):
                continue
            if pattern_type is PatternType.PREFIXED or name not in deny_literal:
                return True
        return False

    def _applicable(self, resource_type: ResourceType, name: str) -> Iterator[AclBinding]:
        literal, prefixed = PatternType.LITERAL, PatternType.PREFIXED
        yield from self._by_pattern.get((resource_type, literal, name), ())
        if name != WILDCARD_RESOURCE:
            yield from self._by_pattern.get((resource_type, literal, WILDCARD_RESOURCE), ())
        for length in self._prefix_lengths.get(resource_type, ()):
            if length <= len(name):
                yield from self._by_pattern.get((resource_type, prefixed, name[:length]), ())
