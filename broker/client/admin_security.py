"""ACLs and SCRAM credentials, as kafka-acls and kafka-configs --entity-type users change them."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from broker.client.admin_transactions import TransactionOperations
from broker.client.errors import KafkaAdminError, check
from broker.client.models import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    ScramCredentialInfo,
)
from broker.security.operations import from_code
from broker.security.scram import MIN_ITERATIONS, ScramMechanism

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_SCRAM, ALTER_SCRAM = 50, 51


def _binding(resource_type, resource_name, pattern_type, acl) -> AclBinding:
    return AclBinding(
        resource_type=from_code(ResourceType, resource_type),
        resource_name=resource_name,
        pattern_type=from_code(PatternType, pattern_type),
        principal=acl.principal,
        host=acl.host,
        operation=from_code(AclOperation, acl.operation),
        permission_type=from_code(AclPermissionType, acl.permission_type),
    )


def _filter_fields(f: AclBindingFilter) -> dict:
    return dict(
        resource_type_filter=f.resource_type,
        resource_name_filter=f.resource_name,
        pattern_type_filter=f.pattern_type,
        principal_filter=f.principal,
        host_filter=f.host,
        operation=f.operation,
        permission_type=f.permission_type,
    )


class SecurityOperations(TransactionOperations):
    async def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The ACLs matching the filter (all by default)."""

        async def attempt() -> list[AclBinding]:
            session = await self.any_session()
            response = await session.send(
                session.request(
                    DESCRIBE_ACLS,
                    "DescribeAclsRequest",
                    **_filter_fields(acl_filter or AclBindingFilter()),
                )
            )
            check(response.error_code, response.error_message)
            return [
                _binding(r.resource_type, r.resource_name, r.pattern_type, acl)
                for r in response.resources
                for acl in r.acls
            ]

        return await self.retrying(attempt)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        async def attempt() -> None:
            session = await self.controller()
            response = await session.send(
                session.request(
                    CREATE_ACLS,
                    "CreateAclsRequest",
                    creations=tuple(
                        session.request(
                            CREATE_ACLS,
                            "AclCreation",
                            resource_type=b.resource_type,
                            resource_name=b.resource_name,
                            resource_pattern_type=b.pattern_type,
                            principal=b.principal,
                            host=b.host,
                            operation=b.operation,
                            permission_type=b.permission_type,
                        )
                        for b in bindings
                    ),
                )
            )
            for binding, r in zip(bindings, response.results, strict=True):
                check(r.error_code, r.error_message, binding.resource_name)

        await self.retrying(attempt)

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """Delete every ACL matching any of the filters; returns those deleted."""

        async def attempt() -> list[AclBinding]:
            session = await self.controller()
            response = await session.send(
                session.request(
                    DELETE_ACLS,
                    "DeleteAclsRequest",
                    filters=tuple(
                        session.request(DELETE_ACLS, "DeleteAclsFilter", **_filter_fields(f))
                        for f in filters
                    ),
                )
            )
            deleted = []
            for result in response.filter_results:
                check(result.error_code, result.error_message)
                for m in result.matching_acls:
                    check(m.error_code, m.error_message, m.resource_name)
                    deleted.append(_binding(m.resource_type, m.resource_name, m.pattern_type, m))
            return deleted

        return await self.retrying(attempt)

    async def describe_user_scram_credentials(
        self, users: Sequence[str] | None = None
    ) -> dict[str, list[ScramCredentialInfo]]:
        """Mechanism and iterations of each user's credentials (all users by default);
        RESOURCE_NOT_FOUND for a named user without any."""

        async def attempt() -> dict[str, list[ScramCredentialInfo]]:
            session = await self.any_session()
            names = (
                tuple(session.request(DESCRIBE_SCRAM, "UserName", name=u) for u in users)
                if users is not None
                else None
            )
            response = await session.send(
                session.request(DESCRIBE_SCRAM, "DescribeUserScramCredentialsRequest", users=names)
            )
            check(response.error_code, response.error_message)
            credentials = {}
            for r in response.results:
                check(r.error_code, r.error_message, r.user)
                credentials[r.user] = [
                    ScramCredentialInfo(_mechanism(c.mechanism).mechanism_name, c.iterations)
                    for c in r.credential_infos
                ]
            return credentials

        return await self.retrying(attempt)

    async def upsert_user_scram_credential(
        self,
        user: str,
        password: str,
        mechanism: str = "SCRAM-SHA-512",
        iterations: int = MIN_ITERATIONS,
    ) -> None:
        """Create or replace a user's credential. The password never leaves the client: it
        sends a random salt and the salted password, as Kafka's AdminClient does."""
        scram = _mechanism_named(mechanism)
        salt = secrets.token_bytes(32)
        salted_password = scram.salted_password(password, salt, iterations)
        await self._alter_scram(
            upsertion=dict(
                name=user,
                mechanism=scram.type_id,
                iterations=iterations,
                salt=salt,
                salted_password=salted_password,
            )
        )

    async def delete_user_scram_credential(
        self, user: str, mechanism: str = "SCRAM-SHA-512"
    ) -> None:
        """RESOURCE_NOT_FOUND when the user has no credential for that mechanism."""
        await self._alter_scram(
            deletion=dict(name=user, mechanism=_mechanism_named(mechanism).type_id)
        )

    async def _alter_scram(self, upsertion: dict | None = None, deletion: dict | None = None):
        async def attempt() -> None:
            session = await self.controller()
            response = await session.send(
                session.request(
                    ALTER_SCRAM,
                    "AlterUserScramCredentialsRequest",
                    upsertions=(
                        (session.request(ALTER_SCRAM, "ScramCredentialUpsertion", **upsertion),)
                        if upsertion
                        else ()
                    ),
                    deletions=(
                        (session.request(ALTER_SCRAM, "ScramCredentialDeletion", **deletion),)
                        if deletion
                        else ()
                    ),
                )
            )
            for r in response.results:
                check(r.error_code, r.error_message, r.user)

        await self.retrying(attempt)


def _mechanism(type_id: int) -> ScramMechanism:
    mechanism = ScramMechanism.from_type(type_id)
    if mechanism is None:
        raise KafkaAdminError.from_code(
            ErrorCode.unsupported_sasl_mechanism, f"unknown SCRAM mechanism type {type_id}"
        )
    return mechanism


def _mechanism_named(name: str) -> ScramMechanism:
    mechanism = ScramMechanism.from_name(name)
    if mechanism is None:
        raise KafkaAdminError.from_code(
            ErrorCode.unsupported_sasl_mechanism, f"{name} is not a SCRAM mechanism"
        )
    return mechanism
