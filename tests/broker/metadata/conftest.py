"""A throwaway PostgreSQL database for the metadata store tests."""

from __future__ import annotations

import socket
import uuid

import psycopg
import pytest

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.fixture
def postgres_url():
    """The URL of a database of the test's own on the local PostgreSQL, dropped afterwards."""
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
    except OSError:
        pytest.skip("nothing answers on 127.0.0.1:5432 (tests/services.sh up starts one)")
    name = f"fjord_meta_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_admin(postgres_url):
    """An autocommit connection to the server's maintenance database, to do to the test's
    database what a failover or an operator would."""
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        yield admin
