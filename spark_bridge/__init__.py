"""Spark and Ray Data bridges: DataFrames into the producer actors, bounded reads back into Spark."""

from .reader import read_dataset, read_kafka
from .writer import KafkaWriteError, write_dataset, write_kafka

__all__ = ["KafkaWriteError", "read_dataset", "read_kafka", "write_dataset", "write_kafka"]
