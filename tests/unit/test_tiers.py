"""tests/tiers.py: what the default tier keeps of a parametrized scenario."""

import pytest

from ..tiers import default_keeps


def test_the_cases_not_kept_are_slow_and_every_case_stays():
    params = default_keeps(["a", "b", ("c", 1)], kept=["b"])
    assert [p.values for p in params] == [("a",), ("b",), ("c", 1)]
    assert [[m.name for m in p.marks] for p in params] == [["slow"], [], ["slow"]]


@pytest.mark.parametrize("kept", [[], ["z"]])
def test_keeping_nothing_or_a_case_that_is_not_one_is_refused(kept):
    with pytest.raises(ValueError, match="must keep"):
        default_keeps(["a", "b"], kept=kept)
