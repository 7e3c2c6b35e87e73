"""A throwaway PostgreSQL database for the metadata store tests."""

from __future__ import annotations

import socket

import psycopg
import pytest
from postgres_database import ADMIN_URL, throwaway_database


@pytest.fixture
def postgres_url():
    """The URL of a database of the test's own on the local PostgreSQL, dropped afterwards."""
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
    except OSError:
        pytest.skip("nothing answers on 127.0.0.1:5432 (tests/services.sh up starts one)")
    with throwaway_database("fjord_meta_test") as url:
        yield url


@pytest.fixture
def postgres_admin(postgres_url):
    """An autocommit connection to the server's maintenance database, to do to the test's
    database what a failover or an operator would."""
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        yield admin
