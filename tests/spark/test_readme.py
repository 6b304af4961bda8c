"""Every Python block of README.md and of each page of docs/ (`docs/*.md`) runs as written, each
file's blocks in order, against an embedded broker of this module's own (the blocks use fixed
topic and group names, "events" and "g", which other tests' topics on the session's broker must
not meet), on the session's Ray (`ray_for_spark`). A test's id names the block's file and
section (`docs/metrics.md:outside-ray-stats-cb-1`: the first block under the heading
"Outside Ray: `stats_cb`").

What a block is given, and the only changes made to its text:
- `"broker:9092"` (the blocks' stand-in for your cluster) becomes this broker's address;
- `EmbeddedBroker().start()` becomes a broker started for that block alone (`block_broker`), new
  and empty as the one the block starts, so the topics it creates do not exist yet; it is
  stopped after the block;
- `init_spark(...)` becomes the Spark session already running (`running_spark`, the tests' own):
  one process holds one RayDP session, and a second `init_spark` in it is refused;
- the names a block reads and does not define are given, as the README's reader has them from
  the blocks above or from their own program (`GIVEN`): `config`, `arrow_table` and `table`
  (Kafka sink columns), `Producer`, `KafkaDatasink`, `write_kafka`; with Spark also `spark`,
  `df`, `df_monday`, `df_tuesday` and `ds`. A block reading a name not given fails, as a README
  or page change that leaves a name undefined must;
- the streams (`stream_kafka`, `foreach_batch_kafka`), unbounded as written, get
  `ending_offsets="latest"` (Spark's AvailableNow), and their `/out/` goes to a temporary
  directory;
- the topics the blocks write to and read from exist beforehand (`TOPICS`), with the records
  the blocks before would have written.
A block left open (the metrics block's `producer`) is closed after it.

Blocks that use Spark are marked `spark` and `slow`, as is the Ray-job block, which the default
tier runs as a job (tests/integration/test_ray_job.py); every other block runs in the default tier.
"""

from __future__ import annotations

import ast
import contextlib
import re
from pathlib import Path
from typing import Any

import pytest

from raykafka.driver.admin import Admin
from raykafka.driver.embedded_broker import EmbeddedBroker
from raykafka.tests.integration.test_ray_job import free_names

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # the README first, then each page
README_BOOTSTRAP = "broker:9092"
STARTED_BROKER = "EmbeddedBroker().start()"
TOPICS = {"events": 6, "events-copy": 6, "events-eu": 1, "orders": 1, "orders-clean": 1, "clean": 1}
SPARK_NAMES = {"spark", "df", "df_monday", "df_tuesday", "ds"}
GIVEN = {"config", "arrow_table", "table", "Producer", "KafkaDatasink", "write_kafka", *SPARK_NAMES}
ROWS = 1000  # rows of `arrow_table` and `table`


def readme_blocks() -> list[tuple[str, str]]:
    """(an id naming its file and section, the code) of every ```python block, in the order of
    `DOCS`, each file's blocks in its own order."""
    return [block for path in DOCS for block in file_blocks(path)]


def file_blocks(path: Path) -> list[tuple[str, str]]:
    """(`<file>:<section>-<n>`, the code) of every ```python block of one file, in order. Other
    fenced blocks (bash, sh) are skipped whole, so a `# comment` line in them is no heading."""
    name = path.relative_to(ROOT).as_posix()
    found, heading, seen = [], "top", {}
    for match in re.finditer(r"^(#+ [^\n]*)$|^```(\w*)\n(.*?)^```", path.read_text(), re.M | re.S):
        if match.group(1):
            heading = re.sub(r"[^a-z0-9]+", "-", match.group(1).lstrip("# ").lower()).strip("-")[:40]
            continue
        if match.group(2) != "python":
            continue
        seen[heading] = seen.get(heading, 0) + 1
        found.append((f"{name}:{heading}-{seen[heading]}", match.group(3)))
    return found


def uses_spark(code: str) -> bool:
    return bool(free_names(code) & SPARK_NAMES) or "init_spark" in code or "foreach_batch_kafka" in code


def as_run(code: str, bootstrap: str, out: Path) -> str:
    """The block with the substitutions the module's docstring lists."""
    code = code.replace(README_BOOTSTRAP, bootstrap).replace(STARTED_BROKER, "block_broker")
    code = re.sub(r"\binit_spark\((?:[^()]|\([^()]*\))*\)", "running_spark", code)
    code = code.replace('"/out/', f'"{out}/')
    return _bounded_streams(code)


def _bounded_streams(code: str) -> str:
    """Each `stream_kafka(...)` / `foreach_batch_kafka(...)` call with `ending_offsets="latest"`."""
    tree = ast.parse(code)
    ends = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                "stream_kafka", "foreach_batch_kafka"):
            ends.append((node.end_lineno, node.end_col_offset))
    lines = code.splitlines(keepends=True)
    for line, col in sorted(ends, reverse=True):  # insert before each call's closing parenthesis
        text = lines[line - 1]
        lines[line - 1] = text[:col - 1] + ', ending_offsets="latest"' + text[col - 1:]
    return "".join(lines)


BLOCKS = readme_blocks()


@pytest.fixture(scope="module")
def readme_broker(tmp_path_factory) -> Any:
    with EmbeddedBroker(log_path=tmp_path_factory.mktemp("readme") / "tansu.log") as running:
        with Admin(running.bootstrap) as admin:
            admin.create_topics(TOPICS)
        yield running


@pytest.fixture()
def given(readme_broker) -> dict[str, Any]:
    import pyarrow as pa

    from raykafka import Producer
    from raykafka.spark_bridge import write_kafka
    from raykafka.spark_bridge.ray_data import KafkaDatasink

    rows = pa.table({"key": [b"k%d" % i for i in range(ROWS)], "value": [b"v%d" % i for i in range(ROWS)]})
    return {"config": {"bootstrap.servers": readme_broker.bootstrap},
            "arrow_table": rows, "table": rows, "Producer": Producer, "KafkaDatasink": KafkaDatasink,
            "write_kafka": write_kafka}


def run_block(name: str, code: str, namespace: dict[str, Any], bootstrap: str, out: Path) -> dict[str, Any]:
    assert free_names(code) <= GIVEN, f"the block reads names nothing gives it: {free_names(code) - GIVEN}"
    with contextlib.ExitStack() as stack:
        if STARTED_BROKER in code:
            namespace["block_broker"] = stack.enter_context(EmbeddedBroker(log_path=out / "block-tansu.log"))
        try:
            exec(compile(as_run(code, bootstrap, out), name.split(":", 1)[0], "exec"), namespace)
        finally:
            producer = namespace.get("producer")
            if producer is not None and not getattr(producer, "closed", False):
                producer.close()
    return namespace


def fill(bootstrap: str, topic: str, n: int) -> None:
    from raykafka import Producer

    with Producer({"bootstrap.servers": bootstrap}) as producer:
        result = producer.send_batch(topic, [b"r%d" % i for i in range(n)]).result(60)
    assert result.failed == 0, result


# the README's Ray-job block also runs, as written, as a job on a running cluster in the default
# tier (tests/integration/test_ray_job.py); here, beside the others, under `slow` (about 35 s)
RUN_AS_A_JOB = "README.md:in-a-ray-job-producer-consumer-consumer--1"
DEFAULT_TIER = [pytest.param(name, code, id=name, marks=pytest.mark.slow if name == RUN_AS_A_JOB else ())
                for name, code in BLOCKS if not uses_spark(code)]
SPARK_TIER = [pytest.param(name, code, id=name, marks=[pytest.mark.spark, pytest.mark.slow])
              for name, code in BLOCKS if uses_spark(code)]


def test_the_docs_have_the_blocks_this_module_runs():
    assert len(BLOCKS) >= 12 and len(DEFAULT_TIER) + len(SPARK_TIER) == len(BLOCKS)
    assert len({name for name, _ in BLOCKS}) == len(BLOCKS), "every block has an id of its own"
    assert RUN_AS_A_JOB in {name for name, _ in BLOCKS}, "the block run as a job is still there"
    names = [name for name, _ in BLOCKS]
    for section in ("README.md:in-a-notebook", "README.md:in-a-ray-job", "README.md:transactions",
                    "README.md:ray-data-without-spark", "README.md:watching-a-consumer-group",
                    "docs/reading.md:", "docs/transactions.md:", "docs/writes.md:", "docs/streaming.md:",
                    "docs/admin.md:", "docs/metrics.md:"):
        assert any(n.startswith(section) for n in names), section


def test_every_block_reads_only_names_it_is_given():
    """What `run_block` checks as it runs a block, for every block at once, Spark's included."""
    taken = {name: sorted(free_names(code) - GIVEN) for name, code in BLOCKS}
    assert not {name: names for name, names in taken.items() if names}


@pytest.mark.parametrize(("name", "code"), DEFAULT_TIER)
def test_a_readme_block_runs_as_written(name, code, ray_for_spark, given, readme_broker, tmp_path, capsys):
    bootstrap = readme_broker.bootstrap
    fill(bootstrap, "events", 60)  # what the blocks above would have written
    namespace = run_block(name, code, dict(given), bootstrap, tmp_path)
    out = capsys.readouterr().out
    if "ConsumerGroup" in code:  # the group shows what it handled, in the driver
        handled = re.search(r"^(\d+) records handled$", out, re.M)
        assert handled and int(handled[1]) >= 1 + ROWS, out
        assert "BatchResult" not in out and len(out.splitlines()) < 10, out
    if "KafkaDatasink" in code and "exactly_once" not in code:
        assert namespace["ds"].count() > 0


@pytest.mark.parametrize(("name", "code"), SPARK_TIER)
def test_a_readme_block_with_spark_runs_as_written(name, code, spark, given, readme_broker, tmp_path):
    bootstrap = readme_broker.bootstrap
    fill(bootstrap, "events", 60)
    fill(bootstrap, "events-eu", 10)
    config = given["config"]
    df = spark.range(0, 1000).selectExpr("cast(id % 10 as string) as key", "cast(id as string) as value")
    import ray

    namespace = {**given, "spark": spark, "running_spark": spark, "df": df, "df_monday": df, "df_tuesday": df,
                 "ds": ray.data.from_arrow(given["table"]), "config": config}
    run_block(name, code, namespace, bootstrap, tmp_path)
