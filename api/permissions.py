"""Roles of the control plane's users: viewer, operator and admin, as Django groups.

A viewer reads everything but secrets; an operator also changes topics, groups, offsets and
transactions and runs jobs; an admin also manages ACLs, SCRAM users and broker configs, the
settings that decide who may do what. Superusers are admins. The groups are created by a data
migration, so `manage.py` and the admin site assign roles the Django way.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission

VIEWER, OPERATOR, ADMIN = "viewer", "operator", "admin"
ROLES = (VIEWER, OPERATOR, ADMIN)
RANK = {role: rank for rank, role in enumerate(ROLES, start=1)}


def role_of(user: Any) -> str | None:
    """The highest role the user holds, or None."""
    if not user or not user.is_authenticated or not user.is_active:
        return None
    if user.is_superuser:
        return ADMIN
    names = set(user.groups.values_list("name", flat=True))
    held = [role for role in ROLES if role in names]
    return held[-1] if held else None


def has_role(user: Any, role: str) -> bool:
    held = role_of(user)
    return held is not None and RANK[held] >= RANK[role]


class RolePermission(BasePermission):
    """Reads need `read_role` (viewer), changes `write_role` (operator) of the view;
    `action_roles` names the role of particular actions (an admin-only secret, a job)."""

    message = "Your role does not allow this."

    def required_role(self, request: Any, view: Any) -> str:
        action_roles = getattr(view, "action_roles", {})
        action = getattr(view, "action", None)
        if action in action_roles:
            return action_roles[action]
        if request.method in SAFE_METHODS:
            return getattr(view, "read_role", VIEWER)
        return getattr(view, "write_role", OPERATOR)

    def has_permission(self, request: Any, view: Any) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False
        return has_role(request.user, self.required_role(request, view))
