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


# Ray's options that say what an actor costs or how it fails: set only in actors/options.py.
ACTOR_OPTION_KEYS = {"num_cpus", "num_gpus", "memory", "resources", "max_restarts", "max_task_retries",
                     "max_concurrency", "concurrency_groups"}
# The benchmarks start their own Rays to measure in (driver/ray_runtime.py says so).
BENCH = ROOT / "app" / "bench"


def ray_modules() -> list[Path]:
    """The modules of the floors that may import Ray (`wire/` and `mock/` never do), the benchmarks aside."""
    return [path for floor in sorted(FLOORS) if floor not in ("wire", "mock") for path in modules(floor)
            if BENCH not in path.parents]


def _is_ray(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == name
            and isinstance(node.value, ast.Name) and node.value.id == "ray")


def test_actor_options_are_set_in_actors_options_only():
    """ARCHITECTURE.md: every actor's Ray options are in `actors/options.py`. Elsewhere an actor
    is started through it (`create`, `remote_class`): no `ray.remote(...)` with options, no
    actor `.options(...)` naming one of ACTOR_OPTION_KEYS, no dict of them (a method call may
    still ask for its own retries or concurrency group)."""
    wrong = []
    for path in ray_modules():
        if path == ROOT / "actors" / "options.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Call) and _is_ray(node.func, "remote") and node.keywords:
                wrong.append(f"{where} ray.remote with options")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "options":
                keys = {k.arg for k in node.keywords} & (ACTOR_OPTION_KEYS - {"max_task_retries"})
                if keys:
                    wrong.append(f"{where} .options({', '.join(sorted(keys))})")
            elif isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)} & ACTOR_OPTION_KEYS
                if keys:
                    wrong.append(f"{where} a dict of {', '.join(sorted(keys))}")
    assert not wrong, "\n".join(wrong)


def test_ray_init_is_called_by_ray_runtime_only():
    """driver/ray_runtime.py is the one place raykafka calls `ray.init` (the benchmarks aside)."""
    wrong = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in ray_modules()
             if path != ROOT / "driver" / "ray_runtime.py"
             for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if isinstance(node, ast.Call) and _is_ray(node.func, "init")]
    assert not wrong, "\n".join(wrong)


def test_the_option_rules_see_a_breach():
    """The readings above find what they look for: options.py's own `ray.remote(**on_class)`."""
    tree = ast.parse((ROOT / "actors" / "options.py").read_text())
    assert any(isinstance(n, ast.Call) and _is_ray(n.func, "remote") and n.keywords for n in ast.walk(tree))
