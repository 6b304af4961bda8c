"""Experiments that take the client apart, run from a clone (not shipped in the wheel, as
Sarama keeps its `tools/`): `scaling` (SCALING.md's figures, and the records BENCHMARKS.md's
profiles quote), `lz4_codecs` (the codec comparison in docs/performance.md), `profile_producer`
(a producer's hot spots). `raykafka bench`, the comparison with the other clients, is the
package's own (`app/bench/`)."""
