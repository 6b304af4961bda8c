"""The rule a group sized by lag follows (driver/group_scaling.py): grow after the lag has stayed
above the bound a while, to what the lag asks, within the bounds and the partition count; shrink
one at a time after every member stayed idle a while; judge nothing while a rebalance runs."""

from __future__ import annotations

import pytest

from raykafka.driver.group_scaling import LagScaling


def scaling(**kw):
    return LagScaling(1, 4, lag_per_member=100, grow_after_s=2.0, shrink_after_s=5.0, **kw)


def test_it_grows_only_after_the_lag_stayed_above_the_bound_and_to_what_the_lag_asks():
    rule = scaling()
    assert rule.decide(0.0, 250, 1, 8, settled=True) is None, "a moment's lag moves nothing"
    assert rule.decide(1.0, 250, 1, 8, settled=True) is None
    assert rule.decide(2.0, 250, 1, 8, settled=True) == 3, "ceil(250 / 100)"


def test_a_dip_below_the_bound_starts_the_wait_again():
    rule = scaling()
    rule.decide(0.0, 500, 1, 8, settled=True)
    assert rule.decide(1.5, 50, 1, 8, settled=True) is None
    assert rule.decide(2.5, 500, 1, 8, settled=True) is None, "the wait began again at 2.5"
    assert rule.decide(4.5, 500, 1, 8, settled=True) == 4


@pytest.mark.parametrize(("lag", "partitions", "wanted"), [(10_000, 8, 4), (10_000, 2, 2), (350, 8, 4)])
def test_it_never_goes_beyond_its_max_nor_the_partitions(lag, partitions, wanted):
    rule = scaling()
    rule.decide(0.0, lag, 1, partitions, settled=True)
    assert rule.decide(2.0, lag, 1, partitions, settled=True) == wanted


def test_at_the_ceiling_it_stays():
    rule = scaling()
    assert rule.decide(0.0, 10_000, 2, 2, settled=True) is None
    assert rule.decide(9.0, 10_000, 2, 2, settled=True) is None


def test_it_shrinks_one_at_a_time_after_every_member_stayed_idle():
    rule = scaling()
    assert rule.decide(0.0, 0, 3, 8, settled=True) is None
    assert rule.decide(4.0, 1, 3, 8, settled=True) is None, "a record came: not idle"
    assert rule.decide(5.0, 0, 3, 8, settled=True) is None
    assert rule.decide(10.0, 0, 3, 8, settled=True) == 2
    assert rule.decide(10.0, 0, 1, 8, settled=True) is None, "never below its min"


def test_nothing_is_judged_while_a_rebalance_runs():
    rule = scaling()
    rule.decide(0.0, 500, 1, 8, settled=True)
    assert rule.decide(3.0, 500, 1, 8, settled=False) is None
    assert rule.decide(4.0, 500, 1, 8, settled=True) is None, "the wait starts again once settled"
    assert rule.decide(6.0, 500, 1, 8, settled=True) == 4


@pytest.mark.parametrize(("lo", "hi"), [(2, 1), (-1, 3), (0, 0), (0, 3)])  # with no member, no lag to grow by
def test_bounds_that_make_no_sense_are_refused(lo, hi):
    with pytest.raises(ValueError, match="members: "):
        LagScaling(lo, hi)


def test_lag_bounds_for_a_group_of_a_fixed_size_are_refused_before_anything_starts():
    from raykafka.driver.consumer_group import ConsumerGroup

    with pytest.raises(ValueError, match="only for a group sized by lag, members=\\(min, max\\)"):
        ConsumerGroup({"bootstrap.servers": "h:1", "group.id": "g"}, ["t"], print, members=2, lag_per_member=5)
    with pytest.raises(ValueError, match="members: \\(min, max\\)"):
        ConsumerGroup({"bootstrap.servers": "h:1", "group.id": "g"}, ["t"], print, members=(3, 1))
