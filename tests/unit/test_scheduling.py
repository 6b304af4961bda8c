"""How the suite's tests go to pytest-xdist's parallel workers (tests/scheduling.py)."""

from __future__ import annotations

from types import SimpleNamespace

from ..scheduling import RECORD, SLOW_RECORD, longest_first, recorded_seconds, unit_of


def test_a_module_is_a_unit_and_the_spark_folder_is_one():
    assert unit_of("tests/producer/test_a.py::test_one[x::y]") == unit_of("tests/producer/test_a.py") == "tests/producer/test_a.py"
    assert unit_of("tests/spark/test_b.py::test_two") == unit_of("tests/spark/test_c.py::T::t") == "tests/spark/"


def test_units_go_longest_first_each_in_its_collected_order_and_unknown_ones_last():
    items = [SimpleNamespace(nodeid=n) for n in (
        "tests/unit/test_u.py::a", "tests/producer/test_p.py::a", "tests/producer/test_p.py::b",
        "tests/spark/test_s.py::a", "tests/new/test_n.py::a", "tests/spark/test_t.py::a", "tests/unit/test_u.py::b")]
    seconds = {"tests/unit/test_u.py": 1.0, "tests/producer/test_p.py": 30.0, "tests/spark/": 90.0}
    assert [i.nodeid for i in longest_first(items, seconds)] == [
        "tests/spark/test_s.py::a", "tests/spark/test_t.py::a", "tests/producer/test_p.py::a",
        "tests/producer/test_p.py::b", "tests/unit/test_u.py::a", "tests/unit/test_u.py::b", "tests/new/test_n.py::a"]


def test_the_kept_run_gives_each_unit_its_seconds(tmp_path):
    (tmp_path / "run.xml").write_text(
        '<testsuites><testsuite name="pytest" time="9">'
        '<testcase classname="tests.spark.test_s" name="a" time="2.5"/><testcase classname="tests.spark.test_t" name="b" time="1.5"/>'
        '<testcase classname="tests.producer.test_p" name="c" time="3.0"/></testsuite></testsuites>')
    assert recorded_seconds(tmp_path / "run.xml") == {"tests/spark/": 4.0, "tests/producer/test_p.py": 3.0}
    assert recorded_seconds(tmp_path / "none.xml") == {}
    assert recorded_seconds(RECORD) and recorded_seconds(SLOW_RECORD), "the repository keeps a run of each tier to order by"
