import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_models_and_migrations_agree():
    # makemigrations --check exits non-zero (SystemExit) when a model change lacks a migration.
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
