"""Replication: the partitions a broker hosts as leader or follower (ISR, high watermark)."""
