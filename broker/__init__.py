"""Fjord's data plane: a Kafka-compatible broker. Imports nothing from Django."""
