"""`regroup walkthrough`: the protocol core narrated, step by step, in virtual time.

A small group consumes the topic "orders" while members join, a static member restarts, a member
crashes and the topic grows. After each step it shows what every member did (revoke, assign) and
where the group stands: this is the protocol of docs/protocol.md, running.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from regroup.protocol.shard import format_shards
from regroup.sim.inproc import InProcessGroup


@dataclass(frozen=True)
class Step:
    title: str
    explain: str
    action: Callable[[InProcessGroup], None]
    run_ms: int = 6_000


def _steps() -> list[Step]:
    def start(g: InProcessGroup) -> None:
        for m in ("a", "b"):
            g.join(m, ("orders",))
        g.join("c", ("orders",), instance_id="worker-c")

    def restart_c(g: InProcessGroup) -> None:
        g.leave("c")
        g.run_for(1_000)
        del g.members["c"]
        g.join("c-restarted", ("orders",), instance_id="worker-c")

    return [
        Step("Three members join", "a, b and the static member c (instance worker-c) share 6 partitions.",
             start),
        Step("Scale out: d joins", "Only the members that give something up revoke; d gets each partition "
             "as soon as its previous owner released it. Nobody else pauses.",
             lambda g: g.join("d", ("orders",))),
        Step("Static restart of c", "c leaves with epoch -2 and a new process rejoins with the same "
             "instance id: same partitions, no new group epoch, nobody else notices.", restart_c),
        Step("b crashes", "b stops heartbeating. After the 45 s session timeout the coordinator fences it, "
             "bumps the epoch and hands its partitions out.", lambda g: g.crash("b"), run_ms=50_000),
        Step("The topic grows to 12 partitions", "New metadata bumps the epoch; the new partitions are "
             "spread over the members; existing ones stay where they are.",
             lambda g: g.update_topics({"orders": 12})),
    ]


def _snapshot(g: InProcessGroup) -> dict[str, Any]:
    d = g.coordinator.describe_group(g.group_id)
    return {
        "group_epoch": d.epoch, "target_epoch": d.target_epoch, "state": d.state.value,
        "members": [{"member_id": m.member_id, "instance_id": m.instance_id, "epoch": m.epoch,
                     "status": m.status.value, "assigned": sorted(map(str, m.assigned))}
                    for m in d.members],
    }


def run_walkthrough(json_output: bool) -> None:
    g = InProcessGroup.create({"orders": 6})
    console = Console()
    results = []
    for i, step in enumerate(_steps(), 1):
        start_events, start_hb, t0 = len(g.events), g.heartbeats, g.now
        step.action(g)
        g.run_for(step.run_ms)
        snap = _snapshot(g)
        events = [{"at_ms": e.at_ms - t0, "member": e.member_id, "kind": e.kind, "detail": e.detail}
                  for e in g.events[start_events:]]
        results.append({"step": step.title, **snap, "events": events, "heartbeats": g.heartbeats - start_hb})
        if json_output:
            continue
        console.rule(f"[bold]{i}. {step.title}")
        console.print(step.explain)
        for e in events:
            console.print(f"  +{e['at_ms']:>6} ms  {e['member']:<12} {e['kind']:<7} {e['detail']}")
        table = Table(title=f"group epoch {snap['group_epoch']} · target epoch {snap['target_epoch']} · "
                            f"{snap['state']}")
        for col in ("member", "instance", "epoch", "status", "partitions"):
            table.add_column(col)
        d = g.coordinator.describe_group(g.group_id)
        for m in d.members:
            table.add_row(m.member_id, m.instance_id or "-", str(m.epoch), m.status.value,
                          format_shards(m.assigned))
        console.print(table)
    if json_output:
        print(json.dumps({"steps": results, "records_written": len(g.records)}))
    else:
        console.print(f"\n{len(g.records)} durable records written; replaying them rebuilds this "
                      "exact state.")
