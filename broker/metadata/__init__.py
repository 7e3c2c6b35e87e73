"""Cluster metadata: the durable store (SQLite embedded, PostgreSQL later for cluster mode) and
the in-memory image the request handlers read."""
