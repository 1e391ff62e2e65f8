"""Server-side assignors and the plugin interface they implement.

`default_registry` lists the built-in assignors in Kafka's order: ``uniform`` (the default a group
gets when it names none), then ``range``.
"""

from __future__ import annotations

from regroup.protocol.assignors.base import (
    Assignment,
    Assignor,
    AssignorRegistry,
    GroupSpec,
    MemberSpec,
    validate_assignment,
)
from regroup.protocol.assignors.range import RangeAssignor
from regroup.protocol.assignors.uniform import UniformAssignor

__all__ = [
    "Assignment",
    "Assignor",
    "AssignorRegistry",
    "GroupSpec",
    "MemberSpec",
    "RangeAssignor",
    "UniformAssignor",
    "default_registry",
    "validate_assignment",
]


def default_registry() -> AssignorRegistry:
    """A fresh registry with ``uniform`` (the default) and ``range``."""
    return AssignorRegistry([UniformAssignor(), RangeAssignor()])
