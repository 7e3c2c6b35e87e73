from typing import Any

from django.http import HttpRequest

from api.permissions import ADMIN, OPERATOR, has_role, role_of


def console(request: HttpRequest) -> dict[str, Any]:
    """The user's role, so templates show only the actions it allows."""
    user = getattr(request, "user", None)
    return {
        "role": role_of(user),
        "can_operate": has_role(user, OPERATOR),
        "is_admin": has_role(user, ADMIN),
    }
