"""`regroup demo`: a consumer group doing its job while its membership changes.

Starts a coordinator and the embedded log in a fresh data directory, produces a steady keyed
workload, runs consumer *processes*, and meanwhile scales out by one, scales in by one, rolls a static
member (no rebalance) and kills one member with kill -9. At the end it checks every record: produced,
processed, lost (must be 0) and duplicated (only the kill -9 may cause duplicates: its uncommitted
tail is read again by the next owner).
"""

from __future__ import annotations

import collections
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from regroup.demo.common import (
    GROUP,
    TOPIC,
    Workload,
    group_epoch,
    read_new_lines,
    start_demo_coordinator,
    stop_coordinator,
)
from regroup.log import open_log
from regroup.protocol.shard import format_shards
from regroup.rpc.client import CoordinatorClient


@dataclass
class Member:
    name: str
    proc: subprocess.Popen[bytes]
    out: Path
    instance: str | None = None
    read_pos: int = 0
    processed: int = 0
    last_rate: float = 0.0


@dataclass
class Demo:
    root: Path
    partitions: int
    rate: int
    coordinator_addr: str = ""
    dashboard_url: str = ""
    coordinator: subprocess.Popen[str] | None = None
    members: dict[str, Member] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    _seq: int = 0

    def __post_init__(self) -> None:
        self.workload = Workload(str(self.log_dir), TOPIC, self.partitions, self.rate)

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def produced(self) -> int:
        return self.workload.produced

    def start_member(self, instance: str | None = None) -> str:
        self._seq += 1
        name = f"m{self._seq}"
        out = self.root / f"{name}.out"
        args = [sys.executable, "-m", "regroup.demo.worker", self.coordinator_addr, str(self.log_dir), GROUP,
                str(out), "--topic", TOPIC]
        if instance:
            args += ["--instance", instance]
        err = open(self.root / f"{name}.err", "ab")  # noqa: SIM115 - the child writes to it
        self.members[name] = Member(name, subprocess.Popen(args, stderr=err), out, instance)
        err.close()
        return name

    def stop_member(self, name: str) -> None:
        m = self.members.pop(name)
        m.proc.send_signal(signal.SIGTERM)
        m.proc.wait(timeout=60)

    def kill_member(self, name: str) -> None:
        m = self.members.pop(name)
        m.proc.kill()
        m.proc.wait(timeout=10)


def _count_new(member: Member) -> int:
    """Lines appended to the member's output since the last look."""
    lines, member.read_pos = read_new_lines(member.out, member.read_pos)
    return len(lines)


def _table(demo: Demo, client: CoordinatorClient, phase: str, elapsed: float) -> Table:
    title = f"regroup demo · {elapsed:5.1f} s · {phase} · produced {demo.produced:,}"
    if demo.dashboard_url:
        title += f"\ndashboard: {demo.dashboard_url}"
    table = Table(title=title)
    for col in ("member", "instance", "epoch", "state", "partitions", "records/s", "processed"):
        table.add_column(col)
    try:
        d = client.describe_group(GROUP).description
        by_id = {m.member_id: m for m in d.members}
    except Exception:
        d, by_id = None, {}
    ids = _member_ids(demo)
    for name, m in sorted(demo.members.items()):
        desc = by_id.get(ids.get(name, ""))
        table.add_row(name, m.instance or "-", str(desc.epoch) if desc else "-",
                      desc.status.value if desc else "joining", format_shards(desc.assigned) if desc else "-",
                      f"{m.last_rate:,.0f}", f"{m.processed:,}")
    if d is not None:
        table.caption = f"group epoch {d.epoch} · target epoch {d.target_epoch} · {d.state.value}"
    return table


def _member_ids(demo: Demo) -> dict[str, str]:
    ids = {}
    for name, m in demo.members.items():
        events = m.out.with_suffix(".out.events")
        if events.exists():
            for line in events.read_text().splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[1] == "started":
                    ids[name] = parts[2]
    return ids


def _verify(root: Path, produced: int, partitions: int) -> dict[str, int]:
    log = open_log(str(root / "log"))
    try:
        ends = log.end_offsets(TOPIC)
    finally:
        log.close()
    counts: collections.Counter[tuple[int, int]] = collections.Counter()
    for f in root.glob("*.out"):
        for line in f.read_text().splitlines():
            p, o = line.split()
            counts[(int(p), int(o))] += 1
    in_log = sum(ends.values())
    expected = {(p, o) for p in range(partitions) for o in range(ends.get(p, 0))}
    lost = len(expected - set(counts))
    return {"produced": produced, "in_log": in_log, "processed": sum(counts.values()),
            "unique_processed": len(counts), "lost": lost, "duplicates": sum(n - 1 for n in counts.values())}


def run_consumer_demo(members: int = 3, partitions: int = 12, rate: int = 2_000, duration: float = 60.0,
                      json_output: bool = False, keep: bool = False) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="regroup-demo-"))
    demo = Demo(root, partitions, rate)
    log = open_log(str(demo.log_dir))
    log.create_topic(TOPIC, partitions)
    log.close()
    demo.coordinator, demo.coordinator_addr, demo.dashboard_url = start_demo_coordinator(
        root, str(demo.log_dir), 10_000, 2_000)
    console = Console(stderr=json_output)
    console.print(f"dashboard: {demo.dashboard_url} (while the demo runs)")
    stop = threading.Event()
    producer = threading.Thread(target=demo.workload.run, args=(stop,), daemon=True)
    static_name = None
    step = duration / 6
    plan = [(step * 1, "scale out: +1 member"), (step * 2, "scale in: -1 member"),
            (step * 3, "roll the static member"), (step * 4, "kill -9 a member")]
    try:
        for i in range(members):
            name = demo.start_member(instance="static-1" if i == 0 else None)
            static_name = static_name or name
        producer.start()
        client = CoordinatorClient(demo.coordinator_addr)
        t0 = time.monotonic()
        phase = "steady"
        last_tick = t0
        with Live(console=console, refresh_per_second=4, transient=json_output) as live:
            while time.monotonic() - t0 < duration:
                now = time.monotonic()
                if plan and now - t0 >= plan[0][0]:
                    _, phase = plan.pop(0)
                    epoch_before = group_epoch(client)
                    if demo.events:
                        demo.events[-1]["group_epoch_after"] = epoch_before
                    if phase.startswith("scale out"):
                        who = demo.start_member()
                    elif phase.startswith("scale in"):
                        who = sorted(n for n in demo.members if n != static_name)[-1]
                        demo.stop_member(who)
                    elif phase.startswith("roll"):
                        assert static_name is not None
                        demo.stop_member(static_name)
                        static_name = who = demo.start_member(instance="static-1")
                    else:
                        who = sorted(n for n in demo.members if n != static_name)[0]
                        demo.kill_member(who)
                    demo.events.append({"at_s": round(now - t0, 1), "event": phase, "member": who,
                                        "group_epoch_before": epoch_before})
                if now - last_tick >= 1.0:
                    for m in demo.members.values():
                        n = _count_new(m)
                        m.processed += n
                        m.last_rate = n / (now - last_tick)
                    last_tick = now
                live.update(_table(demo, client, phase, now - t0))
                time.sleep(0.25)
            stop.set()
            producer.join()
            phase = "draining"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if _verify(root, demo.produced, partitions)["lost"] == 0:
                    break
                live.update(_table(demo, client, phase, time.monotonic() - t0))
                time.sleep(0.5)
        if demo.events:
            demo.events[-1]["group_epoch_after"] = group_epoch(client)
        client.close()
    finally:
        stop.set()
        for name in list(demo.members):
            try:
                demo.stop_member(name)
            except Exception:  # best effort at shutdown: make sure nothing is left running
                proc = demo.members.pop(name, None)
                if proc is not None:
                    proc.proc.kill()
        stop_coordinator(demo.coordinator)
    result: dict[str, Any] = {**_verify(root, demo.produced, partitions), "events": demo.events,
                              "data_dir": str(root)}
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
        result["data_dir"] = None
    if json_output:
        print(json.dumps(result))
    else:
        console.print(f"\nproduced {result['produced']:,} · processed {result['processed']:,} "
                      f"({result['unique_processed']:,} distinct) · lost [bold]{result['lost']}[/bold] · "
                      f"duplicates [bold]{result['duplicates']}[/bold] (only the kill -9 may cause them)")
        for ev in demo.events:
            console.print(f"  {ev['at_s']:>5} s  {ev['event']:<24} {ev['member']}  "
                          f"group epoch {ev['group_epoch_before']} → {ev['group_epoch_after']} "
                          f"(measured before the next event)")
    return result

