"""The application floor: what a person runs, above every library floor.

`cli.py` is the `raykafka` command line (one `cli_<command>.py` per command that imports Ray);
`demo.py` is the main job (`raykafka demo`: Spark → Kafka → a Ray consumer group → Spark); and
`bench/` is the benchmark suite behind `raykafka bench`. Imports run one way only:
wire ← actors ← driver ← spark_bridge ← app; nothing below imports from here.
"""
