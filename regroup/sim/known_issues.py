"""Core bugs the simulator has found and that are not fixed yet.

A shell (the member or coordinator node) *arms* an issue when it sees the issue's precondition
happen, on the shards concerned, with ``InvariantChecker.hazard``; the checker then attributes later
violations on those shards to the issue instead of reporting them as new. So a sweep still finds
new bugs while a known one waits for its fix, and the report says how often each known one struck.
Each issue has a strict-xfail regression test that starts passing (and so fails the suite) once the
core is fixed: then delete the issue and its hook.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KnownIssue:
    id: str
    title: str
    regression_test: str
    #: How long after arming a violation on an armed shard is attributed to the issue.
    window_ms: int = 120_000


#: None open. Fixed so far (their regression tests are in tests/sim/test_regressions.py):
#: KI-1 a full heartbeat sent while an Assign was in progress released that Assign's shards;
#: KI-2 a stale join from a known member released its pending revocation.
KNOWN_ISSUES: dict[str, KnownIssue] = {}
