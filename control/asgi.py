"""ASGI entry point: Django over HTTP, Channels consumers over websockets."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control.settings")

# Django must be set up before anything imports models, which Channels' auth middleware does.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # No websocket routes yet: the live dashboards add theirs here.
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter([]))),
    }
)
