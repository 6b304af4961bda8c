"""cluster.yaml passes Ray's own cluster-config validation and installs what raykafka pins."""

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def load():
    return yaml.safe_load((ROOT / "cluster.yaml").read_text())


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


def test_setup_installs_the_pinned_stack_and_java():
    setup = " ".join(load()["setup_commands"])
    pins = (ROOT / "pyproject.toml").read_text()
    for pin in ("ray[data]==2.60.0", "raydp==1.6.5", "pyspark==3.5.7", "pyarrow==17.0.0"):
        assert pin in pins and pin in setup
    assert "openjdk-17" in setup
