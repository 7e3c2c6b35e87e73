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


class IllegalStateError(RuntimeError):
    """A call the client's state does not allow (Java's IllegalStateException): a transaction
    begun twice, a commit with none open, a send before init_transactions()."""


class KafkaTimeoutError(KafkaAdminError):
    """Waited too long on the client side: a record not delivered within delivery_timeout_ms,
    no buffer memory or metadata within max_block_ms (Java's TimeoutException)."""

    def __init__(self, message: str, resource: str | None = None) -> None:
        super().__init__(ErrorCode.request_timed_out, "REQUEST_TIMED_OUT", message, resource)


class ProducerFencedError(KafkaAdminError):
    """Another producer with the same transactional id took over (PRODUCER_FENCED or
    INVALID_PRODUCER_EPOCH): fatal, the producer can only be closed."""


class InvalidTxnStateError(KafkaAdminError):
    """The transaction coordinator refused a request in the transaction's state: fatal."""


class TransactionAbortableError(KafkaAdminError):
    """The open transaction cannot commit (a record failed, its offsets were fenced by the
    group, ...): abort_transaction() and start again; the code is the cause's."""


# -- the consumer's errors ---------------------------------------------------------------------


class OffsetOutOfRangeError(KafkaAdminError):
    """A fetch position outside the log with auto_offset_reset="none"."""

    def __init__(self, partition: tuple[str, int], offset: int) -> None:
        super().__init__(
            ErrorCode.offset_out_of_range,
            "OFFSET_OUT_OF_RANGE",
            f"offset {offset} is out of range and auto_offset_reset is none",
            f"{partition[0]}-{partition[1]}",
        )
        self.partition = partition
        self.offset = offset


class NoOffsetForPartitionError(KafkaAdminError):
    """No committed offset and auto_offset_reset="none" (Kafka's NoOffsetForPartitionException)."""

    def __init__(self, partition: tuple[str, int]) -> None:
        super().__init__(
            ErrorCode.offset_out_of_range,
            "NO_OFFSET_FOR_PARTITION",
            "no committed offset and auto_offset_reset is none",
            f"{partition[0]}-{partition[1]}",
        )
        self.partition = partition


class CommitFailedError(KafkaAdminError):
    """An OffsetCommit the group refused because the member is no longer who it was when the
    records were handed out: ILLEGAL_GENERATION, STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID,
    FENCED_INSTANCE_ID or REBALANCE_IN_PROGRESS. The partitions may belong to another member
    now; their records will be processed again there."""


class GroupMembershipError(KafkaAdminError):
    """A fatal answer of the group coordinator to a join or heartbeat (FENCED_INSTANCE_ID,
    UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, authorization, ...): the consumer left the
    group and raises it from its next poll."""
