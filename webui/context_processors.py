from typing import Any

from django.http import HttpRequest

from api.permissions import ADMIN, OPERATOR, RANK, role_of


def console(request: HttpRequest) -> dict[str, Any]:
    """The user's role, so templates show only the actions it allows (looked up once: every
    page renders this)."""
    role = role_of(getattr(request, "user", None))
    rank = RANK.get(role, 0)
    return {"role": role, "can_operate": rank >= RANK[OPERATOR], "is_admin": rank >= RANK[ADMIN]}
