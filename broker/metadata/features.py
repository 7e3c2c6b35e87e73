"""Feature flags (KIP-584, KIP-778): the levels this broker supports, the finalized levels the
cluster runs at, and the checks of Kafka's FeatureControlManager.updateFeatures.

metadata.version 30 is Kafka 4.3's IBP_4_3_IV0, the only level Fjord implements.
transaction.version 2 is KIP-890's transactions v2 (Produce v12, EndTxn v5 and TxnOffsetCommit
v5: partitions join a transaction implicitly and every transaction's end bumps the epoch),
which clients turn on by themselves once it is finalized; as in Kafka 4.x a new cluster starts
at 2, and a store finalized earlier keeps its level until UpdateFeatures changes it. Levels 0
and 1 behave alike for clients (in Kafka they differ in the coordinator's log format).
group.version 0 turns the consumer group protocol (KIP-848) off, as in Kafka (the broker's
`consumer_protocol_enabled`)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

METADATA_VERSION = "metadata.version"
TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"

# feature -> (min, max) supported level
SUPPORTED: dict[str, tuple[int, int]] = {
    METADATA_VERSION: (30, 30),
    TRANSACTION_VERSION: (0, 2),
    GROUP_VERSION: (0, 1),
}
# The levels a new cluster is finalized at (Kafka's bootstrap levels for its metadata.version).
DEFAULT_LEVELS: dict[str, int] = {METADATA_VERSION: 30, TRANSACTION_VERSION: 2, GROUP_VERSION: 1}


class UpgradeType(enum.IntEnum):
    """Kafka's FeatureUpdate.UpgradeType (UpdateFeatures v1+'s upgrade_type)."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3

    @classmethod
    def from_code(cls, code: int) -> UpgradeType:
        return cls(code) if code in cls._value2member_map_ else cls.UNKNOWN


@dataclass(frozen=True)
class FeatureUpdate:
    name: str
    level: int
    upgrade_type: UpgradeType


class InvalidFeatureUpdate(Exception):
    """Kafka's INVALID_UPDATE_VERSION, with FeatureControlManager's message."""

    def __init__(self, update: FeatureUpdate, reason: str) -> None:
        super().__init__(
            f"Invalid update version {update.level} for feature {update.name}. {reason}"
        )


@dataclass(frozen=True)
class FinalizedFeatures:
    """The finalized levels (level 0: not finalized) and their epoch, which every applied
    update bumps (Kafka's is the metadata log offset of the last record)."""

    levels: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_LEVELS))
    epoch: int = 0

    def level(self, name: str) -> int:
        return self.levels.get(name, 0)

    def updated(self, updates: Iterable[FeatureUpdate], node_id: int) -> FinalizedFeatures:
        """The features after `updates`, all or none: raises InvalidFeatureUpdate for the
        first one Kafka refuses. No updates, no change (Kafka writes no record)."""
        updates = list(updates)
        if not updates:
            return self
        levels = dict(self.levels)
        for update in updates:
            _check(update, self.level(update.name), node_id)
            levels[update.name] = update.level
        return FinalizedFeatures(levels, self.epoch + 1)


def _check(update: FeatureUpdate, current: int, node_id: int) -> None:
    """FeatureControlManager.updateFeature's checks, in its order."""
    if update.upgrade_type is UpgradeType.UNKNOWN:
        raise InvalidFeatureUpdate(
            update, "The controller does not support the given upgrade type."
        )
    if update.level < 0:
        raise InvalidFeatureUpdate(update, "A feature version cannot be less than 0.")
    low, high = SUPPORTED.get(update.name, (0, 0))  # QuorumFeatures.DISABLED
    if not low <= update.level <= high:
        what = f"Local controller {node_id}"
        if high == 0:
            raise InvalidFeatureUpdate(update, f"{what} does not support this feature.")
        supported = str(low) if low == high else f"{low}-{high}"
        raise InvalidFeatureUpdate(update, f"{what} only supports versions {supported}")
    if update.level < current and update.upgrade_type is UpgradeType.UPGRADE:
        raise InvalidFeatureUpdate(
            update,
            "Can't downgrade the version of this feature without setting the upgrade type to "
            "either safe or unsafe downgrade.",
        )
    if update.level > current and update.upgrade_type is not UpgradeType.UPGRADE:
        raise InvalidFeatureUpdate(update, "Can't downgrade to a newer version.")
    if update.name not in SUPPORTED:  # level 0 of an unknown feature: Features.featureFromName
        raise InvalidFeatureUpdate(update, f"Feature {update.name} not found.")
