"""ASGI entry point: Django over HTTP, Channels consumers over websockets."""

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control.settings")

# Django must be set up before anything imports models, which Channels' auth middleware does.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from api import sampling  # noqa: E402
from webui.routing import websocket_urlpatterns  # noqa: E402


class EmbeddedSampler:
    """Starts the metrics sampler on the server's loop at the first connection, when this
    process is the one that samples (FJORD_SAMPLER "web": no Redis, so only consumers in this
    process can be reached). Daphne has no lifespan events to start it earlier."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        sampling.start_embedded_sampler()
        return await self.app(scope, receive, send)


class OriginValidator:
    """AllowedHostsOriginValidator built per connection: it reads ALLOWED_HOSTS when built,
    and this module is imported before test settings (or a settings override) apply."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        return await AllowedHostsOriginValidator(self.app)(scope, receive, send)


application = EmbeddedSampler(
    ProtocolTypeRouter(
        {
            "http": django_asgi_app,
            "websocket": OriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
)
