"""Group and transactional ids land on the partition Kafka would choose."""

from broker.coordinator.placement import java_string_hash, partition_for


def test_java_string_hash_matches_java():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert java_string_hash("é€𝄞") == ((0xE9 * 31 + 0x20AC) * 31 + 0xD834) * 31 + 0xDD1E


def test_partition_for_uses_kafkas_abs():
    assert partition_for("polygenelubricants", 50) == 0  # abs(MIN_VALUE) is 0 in Kafka's Utils
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("x", 1) == 0
