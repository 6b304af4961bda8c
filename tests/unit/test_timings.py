"""docs/tests.md's breakdown is written from a run's JUnit XML (tests/timings.py)."""

from __future__ import annotations

import gzip
import os
import time

from ..processes import WorkerCount
from ..timings import HEADING, cases, module_of, record, replace_section, section, slow_section

XML = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" time="100.5">
<testcase classname="tests.producer.test_a" name="test_one" time="40.0"/>
<testcase classname="tests.producer.test_a" name="test_two" time="10.0"/>
<testcase classname="tests.unit.test_b.TestThing" name="test_three" time="1.0"/>
<testcase classname="tests.chaos.test_c" name="test_four[x|y]" time="30.0"><skipped message="slow"/></testcase>
</testsuite></testsuites>"""


def with_properties(xml: str, case: str, properties: str, extra: str = "") -> str:
    """`xml` with the test case `case` (its name and time, as XML has them) given `properties`
    (the elements, written out) and `extra` after them."""
    return xml.replace(f"{case}/>", f"{case}><properties>{properties}</properties>{extra}</testcase>")


def test_the_breakdown_sums_by_folder_and_module_and_names_the_slowest(tmp_path):
    path = tmp_path / "run.xml"
    path.write_text(XML)
    found, wall = cases(path)
    assert wall == 100.5 and [c.outcome for c in found] == ["passed", "passed", "passed", "skipped"]
    text = section(found, wall, "run.xml")
    assert "3 tests ran and 1 were skipped in 100 s of wall time, 81 s of it in the tests" in text
    assert "| tests/producer | 2 | 50 | 62% |" in text and "| tests/unit | 1 | 1 | 1% |" in text
    assert "| tests/producer/test_a.py | 2 | 50 |" in text
    assert text.index("test_one | 40.0") < text.index("test_four[x/y] | 30.0")


def test_a_module_is_named_by_its_file_with_or_without_a_class_or_prefix():
    assert module_of("tests.unit.test_b.TestThing") == "tests/unit/test_b.py"
    assert module_of("raykafka.tests.spark.test_readme") == "tests/spark/test_readme.py"


def test_the_section_is_replaced_in_place_or_appended():
    page = f"# Tests\n\n## A\ntext\n\n{HEADING}\nold\n\n## B\nmore\n"
    again = replace_section(page, f"{HEADING}\n\nnew\n")
    assert "old" not in again and "new" in again and again.index("new") < again.index("## B")
    assert replace_section("# Tests\n", f"{HEADING}\n\nnew\n").endswith(f"{HEADING}\n\nnew\n")


def test_the_slow_tier_is_told_apart_with_its_own_totals_and_slowest(tmp_path):
    path = tmp_path / "slow.xml"
    path.write_text(XML)
    text = slow_section(*cases(path), "slow.xml")
    assert text.startswith("### The slow tier")
    assert "3 ran and 1 were skipped in 100 s of wall time" in text
    assert text.index("test_one | 40.0") < text.index("test_two | 10.0")


def test_a_run_with_failures_names_them(tmp_path):
    path = tmp_path / "run.xml"
    path.write_text(XML.replace('name="test_two" time="10.0"/>', 'name="test_two" time="10.0"><failure message="x"/></testcase>'))
    text = section(*cases(path), "run.xml")
    assert "3 tests ran (1 failed: tests/producer/test_a.py::test_two) and 1 were skipped" in text


def test_the_ray_processes_each_test_started_are_summed_and_kept_in_the_record(tmp_path):
    counted = with_properties(XML, 'name="test_one" time="40.0"', '<property name="ray_workers" value="7"/>'
                              '<property name="other" value="x"/>', "<system-out>long</system-out>")
    counted = with_properties(counted, 'name="test_two" time="10.0"', '<property name="ray_workers" value="5"/>')
    (tmp_path / "run.xml").write_text(counted)
    record(tmp_path / "run.xml", tmp_path / "run.xml.gz")
    found, wall = cases(tmp_path / "run.xml.gz")
    assert wall == 100.5 and [c.workers for c in found] == [7, 5, None, None]
    assert [c.outcome for c in found] == ["passed", "passed", "passed", "skipped"]
    assert b"long" not in gzip.open(tmp_path / "run.xml.gz").read(), "only names, times, outcomes and processes"
    text = section(found, wall, "run.xml.gz")
    assert "They started 12 Ray worker processes" in text
    assert "| tests/producer | 2 | 50 | 62% | 12 |" in text and "| tests/unit | 1 | 1 | 1% | 0 |" in text
    assert "| tests/producer/test_a.py | 2 | 50 | 12 |" in text
    assert "in 100 s of wall time, and started 12 Ray worker processes." in slow_section(found, wall, "slow.xml.gz")
    (tmp_path / "plain.xml").write_text(XML)
    plain = section(*cases(tmp_path / "plain.xml"), "plain.xml")
    assert "Ray processes" not in plain and "Ray worker" not in plain, "a run that did not count them has no column"


def test_each_tests_cpu_is_kept_in_the_record_and_ranks_the_modules(tmp_path):
    counted = with_properties(XML, 'name="test_one" time="40.0"', '<property name="ray_workers" value="2"/>'
                              '<property name="cpu_seconds" value="3.25"/>')
    counted = with_properties(counted, 'name="test_three" time="1.0"', '<property name="cpu_seconds" value="60.5"/>')
    (tmp_path / "run.xml").write_text(counted)
    record(tmp_path / "run.xml", tmp_path / "run.xml.gz")
    found, wall = cases(tmp_path / "run.xml.gz")
    assert [c.cpu for c in found] == [3.25, None, 60.5, None] and [c.workers for c in found] == [2, None, None, None]
    text = section(found, wall, "run.xml.gz")
    assert "64 s in the tests." in text
    assert "| tests/producer | 2 | 50 | 62% | 3 | 2 |" in text and "| tests/unit | 1 | 1 | 1% | 60 | 0 |" in text
    assert "modules that spent the most CPU" in text
    assert text.index("| tests/unit/test_b.py | 1 | 1 | 60 | 0 |") < text.index("| tests/producer/test_a.py | 2 | 50 | 3 | 2 |"), \
        "the module that spent the most CPU comes first, whatever its wall time"
    (tmp_path / "plain.xml").write_text(XML)
    assert "CPU seconds" not in section(*cases(tmp_path / "plain.xml"), "plain.xml"), "a run that did not count it has no column"


def test_the_worker_count_takes_only_the_runs_sessions_and_sees_a_new_worker(tmp_path):
    def worker(session: str, n: int) -> None:
        logs = tmp_path / session / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"python-core-worker-{n}.log").touch()
        (logs / f"worker-{n}.out").touch()  # not the one counted: one core-worker log a process
        os.utime(logs, ns=(n, n))  # a new mtime, whatever the clock's tick

    worker("session_old", 1)
    count = WorkerCount(tmp_path)
    assert count.started() == 0, "a session from before the run is not the run's"
    worker("session_new", 2)
    (tmp_path / "session_latest").symlink_to(tmp_path / "session_new")
    assert count.started() == 1
    worker("session_new", 3)
    worker("session_old", 4)
    assert count.started() == 2


def test_the_runs_cpu_is_kept_in_the_record_and_bounds_its_wall_time(tmp_path):
    """A run of 2,400 CPU seconds on 2 cores cannot end in under 1,200 s: the section says so."""
    from ..timings import cpu_of

    path = tmp_path / "run.xml"
    path.write_text(XML.replace('time="100.5">', 'time="1500.0"><properties><property name="cpu_seconds" '
                                'value="2400.0"/><property name="cpus" value="2"/></properties>', 1))
    record(path, tmp_path / "kept.xml.gz")
    assert cpu_of(tmp_path / "kept.xml.gz") == cpu_of(path) == (2400.0, 2)
    text = section(*cases(path), "run.xml", cpu_of(path))
    assert "2 cores were busy 2,400 s of CPU" in text and "80% of what they could give" in text
    assert "cannot end in under 1,200 s on 2 cores" in text and "if the machine ran nothing else" in text
    plain = tmp_path / "plain.xml"
    plain.write_text(XML)
    assert cpu_of(plain) is None and "of CPU" not in section(*cases(plain), "plain.xml", cpu_of(plain))


def test_busy_cpu_is_read_from_proc_stat_without_idle_or_iowait(tmp_path):
    import os

    from ..cpu_time import busy_seconds, cores

    stat = tmp_path / "stat"
    hz = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal guest guest_nice, in clock ticks
    stat.write_text(f"cpu  {3 * hz} {hz} {2 * hz} {50 * hz} {7 * hz} 0 {hz} {hz} {4 * hz} 0\n"
                    "cpu0 1 0 0 0 0 0 0 0 0 0\ncpu1 1 0 0 0 0 0 0 0 0 0\nintr 5\n")
    assert busy_seconds(stat) == 7.0  # 3 + 1 + 2 + 1: not idle, iowait, steal nor guest (counted in user)
    assert cores(stat) == 2
    assert busy_seconds(tmp_path / "none") is None


def test_whose_cpu_it_was_is_kept_in_the_record_and_shown_by_kind(tmp_path):
    from ..timings import cpu_by_process_of, cpu_of

    kinds = '{"Ray workers (every actor and task)":[790,1445.9],"Ray: raylet":[13,164.0]}'
    path = tmp_path / "run.xml"
    path.write_text(XML.replace('time="100.5">', 'time="1500.0"><properties><property name="cpu_seconds" '
                                f'value="2400.0"/><property name="cpus" value="2"/><property name="cpu_by_process" '
                                f"value='{kinds}'/></properties>", 1))
    record(path, tmp_path / "kept.xml.gz")
    by_process = cpu_by_process_of(tmp_path / "kept.xml.gz")
    assert by_process == cpu_by_process_of(path) == {"Ray workers (every actor and task)": (790, 1445.9),
                                                     "Ray: raylet": (13, 164.0)}
    text = section(*cases(path), "run.xml", cpu_of(path), by_process)
    assert "The kinds sum to 1,610 s of the 2,400 s the machine counted" in text
    assert "| Ray workers (every actor and task) | 790 | 1,446 | 90% |" in text and "| Ray: raylet | 13 | 164 | 10% |" in text
    assert cpu_by_process_of(tmp_path / "run.xml") is not None
    plain = tmp_path / "plain.xml"
    plain.write_text(XML)
    assert cpu_by_process_of(plain) is None and "Whose CPU" not in section(*cases(plain), "plain.xml")


def test_the_cpu_of_every_process_below_the_run_is_summed_by_kind():
    """A child of this process that spends CPU is found and counted under its kind; this process
    under the test process's."""
    import subprocess
    import sys

    from ..cpu_time import OTHER, TEST_PROCESS, WORKERS, ProcessCpu, kind_of

    assert kind_of(["/venv/bin/python", ".../ray/_private/workers/default_worker.py", "--node-ip-address=x"]) \
        == kind_of(["ray::IDLE"]) == kind_of(["ray::LeaderDispatcher.dispatch"]) == WORKERS
    assert kind_of(["/usr/bin/java", "-cp", "spark.jar"]) == "Spark's JVM" and kind_of(["sleep", "1"]) == OTHER
    assert kind_of(["python", "-u", ".../ray/dashboard/agent.py", "--raylet-name=/tmp/ray/s/sockets/raylet"]) \
        == kind_of(["ray::DashboardAgent"]) == "Ray: dashboard agent"
    # the raylet's arguments hold its agents' command lines
    assert kind_of([".../ray/core/src/ray/raylet/raylet", "--raylet_socket_name=x", "--store_socket_name=y",
                    "--dashboard_agent_command=python -u .../ray/dashboard/agent.py"]) == "Ray: raylet"
    sampler = ProcessCpu()
    child = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.3\n"
                              "while time.process_time() < end: pass\ntime.sleep(30)"])
    hz = os.sysconf("SC_CLK_TCK")
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            sampler.sample()
            mine = [seen for (pid, _), seen in sampler.seen.items() if pid == child.pid]
            if mine and mine[0][1] / hz >= 0.3:
                break
            time.sleep(0.1)
        totals = sampler.totals()
    finally:
        child.kill()
        child.wait()
    assert len(mine) == 1 and mine[0][0] == OTHER and mine[0][1] / hz >= 0.3, mine  # a python -c: no named kind
    assert totals[OTHER][1] >= 0.3 and totals[TEST_PROCESS][0] == 1
    assert sampler.sampled == sum(ticks for _, ticks in sampler.seen.values()) / hz > 0, "the running sum a test's CPU is read from"
    # a pytest-xdist worker runs tests as this process does
    assert kind_of(["/venv/bin/python", "-u", "-c", "import sys;exec(eval(sys.stdin.readline()))"]) == TEST_PROCESS
    assert kind_of(["/venv/bin/python", "-u", "-c", "print('import sys;exec(eval(sys.stdin.readline()))')"]) == OTHER


def test_a_parallel_run_says_how_many_processes_ran_its_tests(tmp_path):
    from ..timings import parallel_of

    path = tmp_path / "run.xml"
    path.write_text(XML.replace('time="100.5">', 'time="100.5"><properties><property name="pytest_workers" '
                                'value="2"/></properties>', 1))
    record(path, tmp_path / "kept.xml.gz")
    assert parallel_of(tmp_path / "kept.xml.gz") == parallel_of(path) == 2
    text = section(*cases(path), "run.xml", parallel=2)
    assert "in 100 s of wall time, by 2 pytest processes side by side" in text and "the tests took 81 s between them" in text
    (tmp_path / "plain.xml").write_text(XML)
    assert parallel_of(tmp_path / "plain.xml") == 1
    assert "side by side" not in section(*cases(tmp_path / "plain.xml"), "plain.xml")
