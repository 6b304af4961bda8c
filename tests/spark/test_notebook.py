"""examples/raykafka_tour.ipynb runs top to bottom (its own broker, Ray and Spark) in a kernel of
this interpreter, every cell without error, and prints the counts it should. It is executed with
nbclient; the `notebook` extra brings nbclient, nbformat, ipykernel and matplotlib (the test
extra too), and the test is skipped where they are missing."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "raykafka_tour.ipynb"
KERNEL = "raykafka-notebook-test"


def kernel_of_this_python(root: Path) -> Path:
    """A kernel spec running ipykernel in this interpreter (the venv with raykafka), under `root`."""
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "raykafka test", "language": "python"}))
    return root


@pytest.mark.broker
def test_ranges_resolve_inside_a_running_loop(bootstrap, topic_name):
    """A Jupyter cell runs inside the kernel's event loop: `read_kafka` must plan its ranges there."""
    from raykafka.driver.admin import Admin
    from raykafka.spark_bridge.offsets import PartitionRange, resolve_ranges

    topic = topic_name("in-loop")
    config = {"bootstrap.servers": bootstrap}
    with Admin(config) as admin:
        admin.create_topics({topic: 2})

    async def cell():
        return resolve_ranges(config, topic)

    ranges = sorted(asyncio.run(cell()), key=lambda r: r.partition)
    assert ranges == [PartitionRange(topic, 0, 0, 0), PartitionRange(topic, 1, 0, 0)]


@pytest.mark.broker
@pytest.mark.ray
@pytest.mark.spark
@pytest.mark.slow
def test_tour_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")

    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") and not c.get("execution_count") for c in nb.cells if c.cell_type == "code"), \
        "the notebook is stored without outputs"
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_of_this_python(tmp_path / "jupyter")))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # the notebook starts its own local Ray
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=600, startup_timeout=120,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the cell if any cell fails

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "every code cell ran"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for c in code for o in c.outputs if o.output_type == "stream")
    rows = 20_000
    assert f"write: {rows:,} delivered, 0 failed" in text
    assert f"read back: {rows:,} rows" in text
    assert f"consumer group counted {rows:,} records" in text
    assert f", {rows:,} rows\n" in text.split("stream: ", 1)[1]  # every record in some micro-batch
    assert f"committed by the stream: {rows:,} records" in text
    assert "stopped: Spark, Ray and the broker" in text
    images = [o for c in code for o in c.outputs if o.output_type == "display_data" and "image/png" in o.data]
    assert len(images) == 1, "the throughput plot is drawn"
