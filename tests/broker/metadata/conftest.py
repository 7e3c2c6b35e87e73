"""A throwaway PostgreSQL database for the metadata store tests."""

from __future__ import annotations

import psycopg
import pytest
from postgres_database import ADMIN_URL, skip_without_postgres, throwaway_database


@pytest.fixture
def postgres_url():
    """The URL of a database of the test's own on the local PostgreSQL, dropped afterwards."""
    skip_without_postgres()
    with throwaway_database("fjord_meta_test") as url:
        yield url


@pytest.fixture
def postgres_admin(postgres_url):
    """An autocommit connection to the server's maintenance database, to do to the test's
    database what a failover or an operator would."""
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        yield admin
