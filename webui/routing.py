from django.urls import path

from webui.consumers import DashboardConsumer

websocket_urlpatterns = [
    path("ws/dashboard/", DashboardConsumer.as_asgi(), name="ws-dashboard"),
]
