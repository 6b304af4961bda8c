"""Ray jobs as Ray users run them: the README's Ray-job example as a job on a running cluster.

The cluster is a real `ray start --head --block` on free ports, in its own temp dir, with its
own auth token, so it meets no other Ray on the machine; it is stopped by its process id after
the module, and any process still naming its temp dir is ended. Jobs are separate Python
processes: with `RAY_ADDRESS` (what `ray job submit` gives a job), or on the head with only the
address `ray start` recorded (what `ray submit cluster.yaml` runs). A last job runs with no
cluster at all and must get Ray's own defaults, not a count of CPUs chosen by raykafka.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from raykafka.driver.admin import Admin
from raykafka.wire.cluster import Cluster
from raykafka.wire.config import parse_config
from raykafka.wire.fetch import log_bounds

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
JOB_TIMEOUT = 240  # seconds a job may take before the test fails (a run took 25-65 s on 2 busy cores)
README_BOOTSTRAP = "broker:9092"

# What the README's example takes as given and does not define: a table with Kafka sink columns.
PRELUDE = """\
import pyarrow as pa
arrow_table = pa.table({"key": [b"k%d" % i for i in range(1000)], "value": [b"v%d" % i for i in range(1000)]})
"""
GIVEN = {"arrow_table"}
ROWS = 1000
# After the example: which cluster the job ran on.
EPILOGUE = """
import ray
print("gcs_address", ray.get_runtime_context().gcs_address)
"""


def readme_ray_job_example() -> str:
    """The first Python block under README.md's "### In a Ray job" heading, as written there."""
    section = (ROOT / "README.md").read_text().split("### In a Ray job", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def free_names(source: str) -> set[str]:
    """Names the code reads but never binds (nor are builtins): what it needs from outside."""
    bound, read = set(), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store) else read).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
    return read - bound - set(dir(builtins))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_naming(text: str) -> list[int]:
    """Ids of the processes whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:  # ended meanwhile, or not ours to read
                pass
    return found


def end_processes_naming(text: str, grace: float = 30.0) -> list[int]:
    """End what is left of a Ray we started (every such process names its temp dir) once `grace`
    seconds have not seen it exit by itself; returns the processes that had to be ended."""
    deadline = time.monotonic() + grace
    while (left := processes_naming(text)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def job_env(**extra: str) -> dict[str, str]:
    """This environment without any Ray address or auth setting of the test process, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    env.update(extra)
    return env


def run_job(script: str, env: dict[str, str], cwd: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=JOB_TIMEOUT)
    assert done.returncode == 0, f"job exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return done


@dataclass
class RayCluster:
    address: str  # the GCS address, host:port
    temp_root: str  # RAY_TMPDIR for a job on the head: the Ray temp dir is temp_root/ray
    auth: dict[str, str]  # the token both the cluster and its jobs use


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    """A one-node Ray cluster from `ray start --head`, as on a real head node."""
    root = tempfile.mkdtemp(prefix="rk-ray-")  # short: Ray's socket paths live below it
    temp_dir = os.path.join(root, "ray")
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    ray_cli = str(Path(sys.executable).with_name("ray"))
    ports = {option: free_port() for option in (
        "port", "node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port", "runtime-env-agent-port", "metrics-export-port")}
    args = [ray_cli, "start", "--head", "--block", f"--temp-dir={temp_dir}", "--disable-usage-stats",
            "--include-dashboard=false", *(f"--{option}={port}" for option, port in ports.items())]
    log_path = os.path.join(root, "ray-start.log")
    with open(log_path, "w") as log:
        head = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=job_env(**auth),
                                start_new_session=True)
    try:
        address_file = Path(temp_dir, "ray_current_cluster")  # written once the head is up
        deadline = time.monotonic() + 120
        while not address_file.exists():
            assert head.poll() is None, f"ray start exited {head.returncode}:\n{Path(log_path).read_text()[-3000:]}"
            assert time.monotonic() < deadline, "ray start: no cluster address within 120 s"
            time.sleep(0.1)
        yield RayCluster(address=address_file.read_text().strip(), temp_root=root, auth=auth)
    finally:
        head.send_signal(signal.SIGTERM)  # `ray start --block` stops its node's processes on SIGTERM
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(10)
        left = end_processes_naming(temp_dir)
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"processes of the test's Ray cluster outlived it: {left}"


def record_count(bootstrap: str, topic: str) -> int:
    async def count() -> int:
        cluster = Cluster(parse_config({"bootstrap.servers": bootstrap}))
        try:
            earliest, ends = await log_bounds(cluster, topic)
            return sum(ends[p] - earliest[p] for p in ends)
        finally:
            await cluster.close()

    return asyncio.run(count())


@pytest.mark.slow  # 35 s; the default tier keeps a job on a running cluster joining it
def test_readme_ray_job_example_runs_as_a_job_on_a_running_cluster(ray_cluster, bootstrap):
    example = readme_ray_job_example()
    assert README_BOOTSTRAP in example
    assert free_names(example) == GIVEN  # the prelude supplies exactly what the example leaves out
    with Admin(bootstrap) as admin:
        if "events" not in admin.list_topics():
            admin.create_topics({"events": 6})
    before = record_count(bootstrap, "events")

    script = PRELUDE + example.replace(README_BOOTSTRAP, bootstrap) + EPILOGUE
    done = run_job(script, job_env(RAY_ADDRESS=ray_cluster.address, **ray_cluster.auth), ray_cluster.temp_root)

    assert f"gcs_address {ray_cluster.address}" in done.stdout  # it joined the cluster, started no Ray
    sent = re.search(r"RecordMetadata\(topic='events', partition=(\d+), offset=(\d+)", done.stdout)
    assert sent, done.stdout
    assert record_count(bootstrap, "events") == before + 1 + ROWS
    from confluent_kafka import Consumer, TopicPartition

    check = Consumer({"bootstrap.servers": bootstrap, "group.id": "ray-job-check", "enable.auto.commit": False})
    try:
        check.assign([TopicPartition("events", int(sent[1]), int(sent[2]))])
        record = None
        deadline = time.monotonic() + 30
        while record is None and time.monotonic() < deadline:
            record = check.poll(1.0)
        assert record is not None and record.error() is None
        assert (record.key(), record.value()) == (b"user-1", b"hello")
    finally:
        check.close()


def test_a_job_on_the_head_joins_the_cluster_ray_start_recorded(ray_cluster, bootstrap, topic_name):
    topic = topic_name("head-job")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 1})
    script = (
        "import ray\n"
        "from raykafka import Producer\n"
        f"with Producer({{'bootstrap.servers': {bootstrap!r}}}) as producer:\n"
        f"    print(producer.send({topic!r}, b'on the head').result(30))\n"
        "print('gcs_address', ray.get_runtime_context().gcs_address)\n")
    done = run_job(script, job_env(RAY_TMPDIR=ray_cluster.temp_root, **ray_cluster.auth), ray_cluster.temp_root)
    assert f"gcs_address {ray_cluster.address}" in done.stdout
    assert f"RecordMetadata(topic='{topic}', partition=0, offset=0" in done.stdout


def test_without_a_cluster_ray_starts_with_its_own_defaults(bootstrap):
    """A machine Ray sees with 3 CPUs gets a Ray of 3 CPUs, not one capped by raykafka; what Ray's
    core prints while it starts (token authentication is on: it stays on) goes to the
    `raykafka.ray` log, not to the job's stderr."""
    root = tempfile.mkdtemp(prefix="rk-ray-")  # no cluster recorded here: Ray starts a new one below
    script = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(name)s %(message)s')\n"
        "import multiprocessing\n"
        "multiprocessing.cpu_count = lambda: 3  # the machine as Ray sees it\n"
        "import ray\n"
        "from raykafka import Producer\n"
        f"with Producer({{'bootstrap.servers': {bootstrap!r}}}):\n"
        "    print('cpus', ray.cluster_resources()['CPU'])\n")
    try:
        done = run_job(script, job_env(RAY_TMPDIR=root, RAY_USE_MULTIPROCESSING_CPU_COUNT="1"), root)
        assert "cpus 3.0" in done.stdout, done.stdout
        assert "Token authentication is enabled" not in done.stderr, done.stderr
        assert "raykafka.ray ray: Token authentication is enabled" in done.stdout, done.stdout
    finally:
        left = end_processes_naming(root)
        shutil.rmtree(root, ignore_errors=True)
    assert not left, f"the job's own Ray outlived it: {left}"
