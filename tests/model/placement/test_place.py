"""The placer walks the registry: every placement family an op record may name has its
rule in ``RULES``, and every op record names one of them (or none: host only)."""

from fastane.model.ops import OPS
from fastane.model.ops.opdef import ANE_FAMILIES
from fastane.model.placement.place import RULES


def test_every_placement_family_has_its_rule():
    assert set(RULES) == set(ANE_FAMILIES)
    assert all(callable(rule) for rule in RULES.values())


def test_every_op_record_names_a_family_with_a_rule_or_none():
    assert {op.ane for op in OPS.values()} <= set(RULES) | {""}
    # a layout op is placed as layout, never by a family's rule
    assert not [name for name, op in OPS.items() if op.kind == "layout" and op.ane]
