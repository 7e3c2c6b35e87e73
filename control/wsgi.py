"""WSGI entry point, for tooling that expects one; production serves ``control.asgi``."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control.settings")

application = get_wsgi_application()
