"""Stats arithmetic: the spelled-out sum adds every counter to its own field."""

import dataclasses

from fastane.stats import COUNTERS, EVENT_COUNTERS, PLAN_COUNTERS, Stats


def test_plus_counts_adds_each_counter_to_its_own_field():
    """``plus_counts`` is written field by field (it runs once a task): a field added,
    removed or reordered in the dataclass without it shows here."""
    a = Stats(*[1 << i for i in range(len(COUNTERS))])
    b = Stats(*[3 << (2 * i) for i in range(len(COUNTERS))])
    total = a.plus_counts(b)
    for name in COUNTERS:
        assert getattr(total, name) == getattr(a, name) + getattr(b, name), name
    assert COUNTERS == tuple(f.name for f in dataclasses.fields(Stats) if f.name != "tasks_detail")
    assert set(EVENT_COUNTERS) | set(PLAN_COUNTERS) == set(COUNTERS)
    assert (a + b).as_dict()["tasks_detail"] == []
