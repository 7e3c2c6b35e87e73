"""Coordinators: the group coordinator (classic and KIP-848 consumer groups) and, later, the
transaction coordinator. Sans-io state machines run by the broker (see runtime.py)."""
