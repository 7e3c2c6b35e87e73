"""Create the first admin of a fresh installation, so that `make run` ends with a login."""

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Create the superuser ADMIN_USERNAME (default admin) with a random password, or the one "
        "in FJORD_ADMIN_PASSWORD, unless a superuser exists; print the login."
    )

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", default=None, help="default: a random one")

    def handle(self, *args, username: str, password: str | None, **options) -> None:
        users = get_user_model()
        existing = users.objects.filter(is_superuser=True).order_by("id").first()
        if existing is not None:
            self.stdout.write(
                f"first admin login: {existing.get_username()} (password as set before; "
                f"`python manage.py changepassword {existing.get_username()}` sets a new one)"
            )
            return
        password = password or secrets.token_urlsafe(12)
        users.objects.create_superuser(username, password=password)
        self.stdout.write(f"first admin login: {username} / {password}")
