"""Throwaway databases on the tests' PostgreSQL (127.0.0.1:5432, DEVELOPERS.md)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def skip_without_postgres() -> None:
    try:
        psycopg.connect(ADMIN_URL, connect_timeout=3).close()
    except psycopg.OperationalError:
        pytest.skip("nothing answers on 127.0.0.1:5432 (tests/services.sh up starts one)")


@contextmanager
def throwaway_database(prefix: str, password: str | None = None) -> Iterator[str]:
    """The URL of a new database named `<prefix>_<random>`, dropped afterwards even while
    something is still connected to it. With `password`, the URL carries one as a
    deployment's does (the tests' server trusts local connections, so any gets in)."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        user = f"postgres:{password}" if password else "postgres"
        yield f"postgresql://{user}@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
