"""Live dashboards: every metrics sample (api.sampling) relayed to the browsers over a
websocket."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from api import sampling
from api.permissions import VIEWER, has_role

# Close codes in the 4000 range are the application's: 4401 not logged in, 4403 no role.
UNAUTHENTICATED, FORBIDDEN = 4401, 4403


@database_sync_to_async
def _may_view(user: Any) -> bool:
    return has_role(user, VIEWER)


@database_sync_to_async
def _latest() -> dict[str, Any] | None:
    snapshot = sampling.latest()
    return sampling.public(snapshot.data) if snapshot is not None else None


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    """ws /ws/dashboard/: {"type": "sample", "data": <snapshot>} once on connect (the latest
    stored one, so a new page is not blank) and then at every sample."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        if not await _may_view(user):
            await self.close(code=FORBIDDEN)
            return
        await self.channel_layer.group_add(sampling.GROUP, self.channel_name)
        await self.accept()
        latest = await _latest()
        if latest is not None:
            await self.send_json({"type": "sample", "data": latest})

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(sampling.GROUP, self.channel_name)

    async def metrics_sample(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "sample", "data": event["data"]})
