"""AlterUserScramCredentials requests as an admin client builds them (test helper)."""

from __future__ import annotations

import hashlib

from kafka_requests import req

SHA256, SHA512 = 1, 2  # the int8 mechanism types of the SCRAM credential APIs


def upsertion(user: str, password: str, mechanism=SHA512, iterations=4096, salt=b"pepper"):
    name = {SHA256: "sha256", SHA512: "sha512"}.get(mechanism, "sha256")
    salted = hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations) if password else b""
    return req(
        51,
        0,
        "ScramCredentialUpsertion",
        name=user,
        mechanism=mechanism,
        iterations=iterations,
        salt=salt,
        salted_password=salted,
    )


def deletion(user: str, mechanism=SHA512):
    return req(51, 0, "ScramCredentialDeletion", name=user, mechanism=mechanism)


async def alter(conn, upsertions=(), deletions=()) -> dict:
    """{user: (error_code, error_message)}"""
    response = await conn.send(
        req(
            51,
            0,
            "AlterUserScramCredentialsRequest",
            deletions=tuple(deletions),
            upsertions=tuple(upsertions),
        )
    )
    return {r.user: (r.error_code, r.error_message) for r in response.results}


async def describe(conn, *users: str):
    names = tuple(req(50, 0, "UserName", name=u) for u in users) if users else None
    return await conn.send(req(50, 0, "DescribeUserScramCredentialsRequest", users=names))
