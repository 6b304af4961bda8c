"""The floors of the package, read from the code's own imports: wire ← actors ← driver ←
spark_bridge ← app, and wire ← mock. A module may import from its own floor and the floors below,
never from one above; `wire/` and `mock/` never import Ray; only `spark_bridge/` imports pyspark
or raydp."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLOORS = {"wire": 0, "mock": 1, "actors": 1, "driver": 2, "spark_bridge": 3, "app": 4}
BELOW = {  # the floors each may import from, besides its own
    "wire": set(),
    "mock": {"wire"},
    "actors": {"wire"},
    "driver": {"wire", "actors"},
    "spark_bridge": {"wire", "actors", "driver"},
    "app": {"wire", "actors", "driver", "spark_bridge"},
}


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in `path`, relative ones resolved."""
    package = ["raykafka", *path.relative_to(ROOT).with_suffix("").parts[:-1]]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            found.append((node.lineno, module))
            if node.module is None:
                found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def floor_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "raykafka" and len(parts) > 1 and parts[1] in FLOORS else None


def modules(floor: str) -> list[Path]:
    return sorted((ROOT / floor).rglob("*.py"))


@pytest.mark.parametrize("floor", sorted(FLOORS))
def test_no_import_runs_back_up(floor):
    wrong = []
    for path in modules(floor):
        for line, module in imports(path):
            target = floor_of(module)
            if target is not None and target != floor and target not in BELOW[floor]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("floor", ["wire", "mock"])
def test_wire_and_mock_never_import_ray(floor):
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}" for path in modules(floor)
             for line, module in imports(path) if module.split(".")[0] == "ray"]
    assert not wrong, "\n".join(wrong)


def test_only_spark_bridge_imports_spark():
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for floor in FLOORS if floor != "spark_bridge" for path in modules(floor)
             for line, module in imports(path) if module.split(".")[0] in ("pyspark", "raydp")]
    assert not wrong, "\n".join(wrong)


def test_the_floors_are_read():
    """The reading above sees an arrow where one is: app's CLI imports the driver's Admin."""
    assert any(module == "raykafka.driver.admin" for _line, module in imports(ROOT / "app" / "cli.py"))
    assert any(floor_of(m) == "wire" for _line, m in imports(ROOT / "mock" / "cluster.py"))
