"""cluster.yaml passes Ray's own cluster-config validation, and its setup would work: an image whose
Python raykafka supports, Java 17, and Python steps that install raykafka with its pinned stack (run
here, as written, in a fresh virtualenv)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]
UBUNTU_PYTHON = {"22.04": "3.10", "24.04": "3.12"}  # the python3 each Ubuntu release ships


def load() -> dict:
    return yaml.safe_load((ROOT / "cluster.yaml").read_text())


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def pinned(name: str) -> str:
    """The version pyproject.toml pins `name` to (`name[extras]==X`)."""
    for dependency in pyproject()["project"]["dependencies"]:
        found = re.fullmatch(rf"{re.escape(name)}(\[[^\]]*\])?==(\S+)", dependency)
        if found:
            return found[2]
    raise AssertionError(f"{name} is not pinned in pyproject.toml")


def python_setup_steps(config: dict) -> list[str]:
    """The node's Python steps: every setup command not run as root (those install system packages)."""
    commands = config["setup_commands"] + config.get("head_setup_commands", [])
    return [c for c in commands if not c.lstrip().startswith("sudo ")]


def test_cluster_yaml_passes_ray_validation():
    util = pytest.importorskip("ray.autoscaler._private.util")
    config = util.prepare_config(load())
    util.validate_config(config)  # raises on a schema violation
    assert config["head_node_type"] in config["available_node_types"]


def test_cluster_yaml_validation_would_catch_a_broken_node_type():
    util = pytest.importorskip("ray.autoscaler._private.util")
    config = util.prepare_config(load())
    config["available_node_types"]["head"]["no_such_option"] = 1
    with pytest.raises(Exception, match="no_such_option"):
        util.validate_config(config)


def test_every_node_runs_a_python_raykafka_supports_and_gets_java_17():
    supported = SpecifierSet(pyproject()["project"]["requires-python"])
    for name, node_type in load()["available_node_types"].items():
        release = re.search(r"ubuntu/server/(\d\d\.\d\d)/", node_type["node_config"]["ImageId"])
        assert release, f"{name}: not an Ubuntu image named by release"
        assert UBUNTU_PYTHON[release[1]] in supported, f"{name}: Ubuntu {release[1]}'s Python is not {supported}"
    system = [c for c in load()["setup_commands"] if c.lstrip().startswith("sudo ")]
    assert any("apt-get install" in c and "openjdk-17-jre-headless" in c and "python3-venv" in c for c in system)


def test_setup_installs_raykafka_at_the_pinned_ray_into_one_virtualenv():
    config = load()
    assert config["file_mounts"]["~/raykafka"] == "."
    steps = python_setup_steps(config)
    installs = [c for c in steps if " pip install " in c]
    assert installs and all(c.startswith("~/raykafka-venv/bin/python -m pip install") for c in installs)
    everything = " ".join(installs)
    assert f'"ray[default]=={pinned("ray")}"' in everything  # the dashboard and job server, same Ray
    assert "-e ~/raykafka" in everything  # raykafka with the rest of its pins
    assert any("raykafka-venv/bin" in c and ".bashrc" in c for c in steps)  # `ray` on PATH for Ray's commands


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_python_setup_steps_install_raykafka_in_a_fresh_virtualenv(tmp_path):
    """Runs cluster.yaml's Python steps as written, with HOME a fresh directory holding the clone
    as `file_mounts` puts it (what git tracks or does not ignore) and `python3` this machine's."""
    home = tmp_path / "home"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (home / "raykafka" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, home / "raykafka" / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(getattr(sys, "_base_executable", sys.executable))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(HOME=str(home), PATH=f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
               PIP_CACHE_DIR=env.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")),
               PIP_REQUIRE_VIRTUALENV="1")  # as Ubuntu's own Python refuses pip (PEP 668)

    timings = []
    for step in python_setup_steps(load()):
        started = time.monotonic()
        done = subprocess.run(["bash", "-c", step], cwd=home, env=env, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, f"{step}\nexited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        timings.append((round(time.monotonic() - started, 1), step))
    print("setup steps (s):", timings)

    venv_python = home / "raykafka-venv" / "bin" / "python"
    report = subprocess.run([str(venv_python), "-c", (
        "import json, sys, boto3, pandas, pyarrow, pyspark, ray, raydp, raykafka\n"
        "from importlib.metadata import version\n"
        "from ray.dashboard.modules.job.sdk import JobSubmissionClient\n"
        "from raykafka import ConsumerGroup, Producer\n"
        "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'raykafka': raykafka.__file__,\n"
        "  **{p: version(p) for p in ('ray', 'raydp', 'pyspark', 'pyarrow', 'pandas')}}))\n")],
        cwd=home, env=env, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    found = json.loads(report.stdout.strip().splitlines()[-1])
    assert found["python"] in SpecifierSet(pyproject()["project"]["requires-python"])
    assert Path(found["raykafka"]).is_relative_to(home / "raykafka")  # the clone on the node, editable
    for name in ("ray", "raydp", "pyspark", "pyarrow", "pandas"):
        assert found[name] == pinned(name), name
    on_path = subprocess.run(["bash", "-c", "source ~/.bashrc && command -v ray"], cwd=home, env=env,
                             capture_output=True, text=True)
    assert on_path.stdout.strip() == str(home / "raykafka-venv" / "bin" / "ray")  # what `ray start` runs
