"""The Kafka wire protocol: framing, headers, the API registry and codecs. Sans-io."""
