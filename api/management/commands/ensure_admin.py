"""Create the first admin of a fresh installation, so that `make run` ends with a login and a
deployment has someone to log in as.

The password never reaches a deployment's logs (journal, container logs): it comes from
FJORD_ADMIN_PASSWORD, which the operator already holds, or is generated and written to a file
only the installation's user can read. Only development mode (`make run`, on a terminal) shows
it."""

import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

PASSWORD_FILE = "first-admin-password"


class Command(BaseCommand):
    help = (
        "Create the superuser --username (default admin), unless a superuser exists, with the "
        "password in FJORD_ADMIN_PASSWORD, else a random one: shown in development mode "
        f"(DJANGO_DEBUG=1), otherwise written to FJORD_VAR_DIR/{PASSWORD_FILE} (mode 0600)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, *args, username: str, **options) -> None:
        users = get_user_model()
        existing = users.objects.filter(is_superuser=True).order_by("id").first()
        if existing is not None:
            self.stdout.write(
                f"first admin login: {existing.get_username()} (password as set before; "
                f"`python manage.py changepassword {existing.get_username()}` sets a new one)"
            )
            return
        if password := os.environ.get("FJORD_ADMIN_PASSWORD"):
            users.objects.create_superuser(username, password=password)
            self.stdout.write(f"first admin login: {username} (password from FJORD_ADMIN_PASSWORD)")
            return
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser(username, password=password)
        if settings.DEBUG:
            self.stdout.write(f"first admin login: {username} / {password}")
            return
        path = write_owner_only(settings.VAR_DIR / PASSWORD_FILE, password + "\n")
        self.stdout.write(
            f"first admin login: {username}, password in {path} (readable by this user only; "
            f"delete it once `python manage.py changepassword {username}` has set another)"
        )


def write_owner_only(path, text: str):
    """Write `text` to `path` with mode 0600, also when the file existed with another mode."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    # O_CREAT's mode applies to a new file only; before writing, so no other user reads it.
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w") as f:
        f.write(text)
    return path
