"""Regular expressions as Kafka compiles them: RE2 (Kafka uses RE2/J for regex subscriptions,
KIP-848, and for ListTransactions' transactional id pattern, KIP-1152).

RE2 runs in time linear in the input: a client's pattern cannot stall the broker's event loop
by backtracking, as one for Python's `re` could. Its syntax is RE2/J's (no lookaround, no
backreferences); a pattern it refuses raises InvalidRegex.
"""

from __future__ import annotations

from functools import lru_cache

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a client's bad pattern is its error, not the broker's log noise


class InvalidRegex(ValueError):
    pass


@lru_cache(maxsize=256)
def compile_regex(pattern: str):
    """A compiled pattern (use `fullmatch`: Kafka matches whole names); cached, since groups
    recompile their subscriptions on every metadata change."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        message = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
        raise InvalidRegex(message) from None
