"""The installed package is the whole package: a wheel built from what git tracks holds every
module outside the tests, and `raykafka` runs from a plain (non-editable) install in a fresh
virtualenv, with the checkout nowhere on its path."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# what the repository holds beside the package: the tests, CI, and the experiments run from a clone
NOT_PACKAGED = ("tests/", ".ci/", "benchmarks/")


def modules() -> list[str]:
    """Every Python file git tracks outside the tests."""
    return [name for name in tracked() if name.endswith(".py") and not name.startswith(NOT_PACKAGED)]


def tracked() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return [name for name in listed if name and (ROOT / name).is_file()]


def test_every_folder_of_modules_is_a_listed_package():
    """setuptools installs the packages pyproject.toml lists, no more: a folder of modules left
    out works from a checkout and is missing from every install."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"raykafka": "."}
    folders = {str(Path(name).parent) for name in modules()}
    assert {"app", "app/bench", "mock"} <= folders
    packages = {"raykafka" if folder == "." else "raykafka." + folder.replace("/", ".") for folder in folders}
    assert packages - set(setuptools["packages"]) == set()
    assert all((ROOT / folder / "__init__.py").is_file() for folder in folders)


def test_the_experiments_stay_out_of_the_wheel_and_out_of_the_package():
    """`benchmarks/` is run from a clone: no listed package holds it, and no packaged module
    imports it (an install would then fail where the checkout works)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert not [p for p in setuptools["packages"] if p.startswith("raykafka.benchmarks")]
    experiments = [name for name in tracked() if name.startswith("benchmarks/") and name.endswith(".py")]
    assert "benchmarks/scaling.py" in experiments
    importing = [name for name in modules() if any(imported.startswith("raykafka.benchmarks")
                                                   for imported in imported_modules(ROOT / name))]
    assert not importing, f"packaged modules that import the experiments: {importing}"


def imported_modules(path: Path) -> list[str]:
    """The absolute names a module imports (its relative imports resolved from its own path)."""
    package = ["raykafka", *path.relative_to(ROOT).parent.parts]
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            names.append(".".join([*base, *(node.module or "").split(".")]).rstrip("."))
    return names


def build_wheel(out: Path) -> Path:
    """A wheel built (as pip builds one) from a copy of the files git tracks."""
    source = out / "source"
    for name in tracked():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (found,) = out.glob("raykafka-*.whl")
    return found


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_raykafka_runs_from_a_plain_install_in_a_fresh_virtualenv(tmp_path):
    """A wheel holding every module and the `raykafka` command; `pip install` of it, with its
    dependencies, into a new virtualenv; then the commands that import the most (`bench`,
    `demo`) answer --help from there, run outside the checkout."""
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as zipped:
        names = set(zipped.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = zipped.read(entry_points).decode()
    missing = [name for name in modules() if f"raykafka/{name}" not in names]
    assert not missing, f"not in the wheel: {missing}"
    assert "raykafka = raykafka.app.cli:main" in scripts

    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    assert installed.returncode == 0, installed.stderr[-3000:]

    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import raykafka.app.bench.suite, raykafka; "
                            "print(raykafka.__file__)"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr[-3000:]
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout  # the installed copy, not the checkout
    for command, usage in (("bench", "usage: raykafka bench"), ("demo", "usage: raykafka demo")):
        done = subprocess.run([str(venv / "bin" / "raykafka"), command, "--help"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        assert usage in done.stdout
