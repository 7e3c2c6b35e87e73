"""The typed error every client operation raises for a Kafka error code."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class KafkaAdminError(Exception):
    """A Kafka error code with Kafka's name for it (TOPIC_ALREADY_EXISTS, ...) and the broker's
    message; `resource` names what it concerns when a request covered several (a topic, a
    group, a transactional id)."""

    def __init__(
        self, code: int, name: str, message: str | None = None, resource: str | None = None
    ) -> None:
        super().__init__(f"{name}: {message}" if message else name)
        self.code = code
        self.name = name
        self.message = message
        self.resource = resource

    @classmethod
    def from_code(
        cls, code: int, message: str | None = None, resource: str | None = None
    ) -> KafkaAdminError:
        try:
            name = ErrorCode(code).name.upper()
        except ValueError:
            name = f"UNKNOWN_ERROR_{code}"
        return cls(code, name, message, resource)

    @property
    def retriable(self) -> bool:
        try:
            return ErrorCode(self.code).retriable
        except ValueError:
            return False


def check(code: int, message: str | None = None, resource: str | None = None) -> None:
    """Raise for any code but NONE."""
    if code != ErrorCode.none:
        raise KafkaAdminError.from_code(code, message, resource)
