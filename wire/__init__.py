"""The Kafka driver without Ray: protocol, record batches, compression, connections, cluster metadata."""
