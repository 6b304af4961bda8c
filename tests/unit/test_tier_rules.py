"""The unit tier's rules hold: `ray.init` raises in a unit test, and a unit test that asks for Ray
fails collection (tests/unit/conftest.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import ray

from .conftest import UNIT, UnitTestStartedRay, pytest_collection_modifyitems


def test_ray_init_raises_in_a_unit_test():
    # in a whole-suite run an earlier tier's Ray is still up; the refused call must not change that
    running_before = ray.is_initialized()
    with pytest.raises(UnitTestStartedRay):
        ray.init(num_cpus=1)
    assert ray.is_initialized() == running_before


def item(path, fixtures=(), marker=None):
    return SimpleNamespace(nodeid=f"{path.name}::t", path=path, fixturenames=list(fixtures),
                           get_closest_marker=lambda name: marker if name == "ray" else None)


def test_a_unit_test_asking_for_ray_fails_collection_and_others_do_not():
    here, elsewhere = UNIT / "test_x.py", UNIT.parent / "producer" / "test_x.py"
    pytest_collection_modifyitems(None, [item(here), item(elsewhere, ["ray_session"]), item(elsewhere, marker=1)])
    for wrong in (item(here, ["ray_session"]), item(here, marker=1)):
        with pytest.raises(pytest.UsageError, match="tests/unit/ runs without Ray"):
            pytest_collection_modifyitems(None, [wrong])
