"""`regroup chaos soak`: a consumer group on a steady keyed load, faults at random, and every record checked.

The soak starts, in a fresh directory: a coordinator with a data dir, a loopback proxy in front of it
(`soak_proxy`), a producer process (`soak_producer`: records with unique ids), N consumer members
(`soak_member`) and M PySpark members (`soak_spark_member`) in one group, half of them static
(`soak_rig`). Then, until ``--minutes`` are up, it injects faults from a seeded schedule
(`soak_schedule`: the same seed, the same faults), each followed by steady load: kill -9 and restart
of a member, SIGSTOP/SIGCONT of a member (a zombie when it outlasts the session timeout), cut
connections, kill -9 and SIGSTOP of the coordinator, a full disk under its store, a damaged store file
(`soak_faults`). Each fault is lifted and the group must recover: everything produced by then
processed. The first faults are one of each kind, and they all run even if they outlast ``--minutes``.

At the end it stops producing, lets the members drain, and checks every record (`soak_verify`):
lost = 0, each duplicate explained by an unclean end of the member life that processed it before
committing, classified by the fault that caused it. It prints a table of the faults by kind and of the
records (``--json``: one JSON object) and exits 1 on a failure: a loss, an unexplained duplicate, a
misread record, a fault not recovered, or any finding that is not a known bug.

Rules of this module: it only runs the schedule and reports; the processes, the faults and the
accounting are the other ``soak_*`` modules'. Progress lines go to stderr as the soak runs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from regroup.chaos.soak_faults import Outcome, inject
from regroup.chaos.soak_rig import TOPIC, Rig, Settings
from regroup.chaos.soak_schedule import KINDS, schedule
from regroup.chaos.soak_verify import Records, account, read_log

__all__ = ["Settings", "dumps", "failed", "print_report", "run_soak"]

#: How long the members may take to process everything once the producer stopped.
DRAIN_TIMEOUT_S = 300.0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_soak(settings: Settings, *, directory: str | None = None, keep: bool = False,
             progress: Callable[[str], None] = _stderr) -> dict[str, Any]:
    """Run a soak; returns the report (`print_report`, `dumps`)."""
    root = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="regroup-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    rig = Rig(root, settings, lambda line: progress(f"{time.time() - rig.t0:7.1f} s  {line}"))
    progress(f"regroup chaos soak: seed {settings.seed}, {settings.minutes:g} min, {settings.members} "
             f"consumer and {settings.spark_members} Spark members, faults: {', '.join(settings.kinds)}; "
             f"files in {root}")
    outcomes: list[Outcome] = []
    produced = 0
    started = time.monotonic()
    try:
        rig.start()
        rig.progress(f"group of {len(rig.names)} running: {', '.join(rig.names)} (even ones static)")
        deadline = time.monotonic() + settings.minutes * 60
        for fault in schedule(settings.seed, settings.kinds, len(rig.names), settings.session_timeout_ms):
            if fault.index > len(settings.kinds) and time.monotonic() + fault.gap_s >= deadline:
                break  # (one fault of each kind runs even past the deadline)
            rig.idle(fault.gap_s)
            rig.progress(fault.describe(rig.names))
            outcome = inject(rig, fault)
            outcomes.append(outcome)
            rec = "not recovered" if outcome.recover_s is None else f"recovered in {outcome.recover_s:.1f} s"
            rig.progress(f"  -> {outcome.outcome}; {rec}; {outcome.detail}")
        rig.idle(max(0.0, deadline - time.monotonic()))
        produced = rig.stop_producer()
        final = rig.ends()
        rig.progress(f"stopped producing at {produced:,} records; draining")
        if not rig.wait_until(lambda: rig.caught_up(final), DRAIN_TIMEOUT_S):
            rig.finding("drain", f"the members did not process everything within {DRAIN_TIMEOUT_S:.0f} s")
    finally:
        rig.shutdown()
        seconds = time.monotonic() - started
    produced = max(produced, rig.produced())
    timeout = settings.recover_timeout_s * (2 if settings.spark_members else 1)
    records = account(rig.ledger, rig.lives, produced, read_log(rig.log_dir, TOPIC),
                      [o.window(timeout) for o in outcomes])
    report = _report(settings, rig, outcomes, records, seconds)
    if keep:
        report["data_dir"] = str(root)
    else:
        shutil.rmtree(root, ignore_errors=True)
    return report


def _report(settings: Settings, rig: Rig, outcomes: list[Outcome], records: Records, seconds: float,
            ) -> dict[str, Any]:
    by_kind: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        mine = [o for o in outcomes if o.fault.kind == kind]
        times = [o.recover_s for o in mine if o.recover_s is not None]
        by_kind[kind] = {
            "count": len(mine), "outcomes": dict(Counter(o.outcome for o in mine).most_common()),
            "recover_p50_s": round(statistics.median(times), 2) if times else None,
            "recover_max_s": round(max(times), 2) if times else None,
            "duplicates_explained": records.by_cause.get(kind, 0)}
    lives = list(rig.lives.values())
    findings = rig.findings
    report: dict[str, Any] = {
        "seed": settings.seed, "settings": settings.as_dict(), "seconds": round(seconds, 1),
        "machine": {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]},
        "replay": replay_command(settings),
        "faults": [o.as_dict(rig.t0) for o in outcomes], "by_kind": by_kind,
        "records": dataclasses.asdict(records),
        "lives": {"started": len(lives), "killed": sum(i.end.startswith("killed") for i in lives),
                  "exited_by_themselves": sum(i.end.startswith("exited") for i in lives)},
        "findings": findings, "data_dir": None,
    }
    report["ok"] = not failed(report)
    return report


def replay_command(settings: Settings) -> str:
    """The command line that replays this soak's fault schedule."""
    kinds = "" if settings.kinds == KINDS else f" --faults {','.join(settings.kinds)}"
    return (f"regroup chaos soak --minutes {settings.minutes:g} --seed {settings.seed} --members "
            f"{settings.members} --spark-members {settings.spark_members} --partitions {settings.partitions} "
            f"--rate {settings.rate}{kinds}")


def failed(report: dict[str, Any]) -> list[str]:
    """Why the soak failed (empty: it passed)."""
    r = report["records"]
    why = []
    if r["lost"]:
        why.append(f"{r['lost']} records lost")
    if r["unexplained"]:
        why.append(f"{r['unexplained']} duplicates unexplained")
    if r["misread"]:
        why.append(f"{len(r['misread'])} records misread")
    why += [f"{f['kind']}: {f['text']}" for f in report["findings"] if not f["known"]]
    return why


def dumps(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=True)


def print_report(report: dict[str, Any]) -> None:
    """The report as tables (``--json`` prints ``report`` itself)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 130)
    s = report["settings"]
    machine = report["machine"]
    faults = Table(title=f"regroup chaos soak · seed {report['seed']} · {report['seconds']:.0f} s · "
                         f"{s['members']} consumer + {s['spark_members']} Spark members · load average "
                         f"{' '.join(map(str, machine['load_average']))} on {machine['cpus']} CPUs")
    for col in ("fault", "count", "outcomes", "recover p50", "recover max", "duplicates explained"):
        faults.add_column(col, justify="left" if col in ("fault", "outcomes") else "right")
    for kind, k in report["by_kind"].items():
        faults.add_row(kind, str(k["count"]), ", ".join(f"{v} {o}" for o, v in k["outcomes"].items()) or "-",
                       "-" if k["recover_p50_s"] is None else f"{k['recover_p50_s']:.1f} s",
                       "-" if k["recover_max_s"] is None else f"{k['recover_max_s']:.1f} s",
                       f"{k['duplicates_explained']:,}")
    console.print(faults)
    r = report["records"]
    records = Table(title="records")
    for col in ("produced", "processed", "distinct", "lost", "duplicated", "explained", "unexplained"):
        records.add_column(col, justify="right")
    records.add_row(f"{r['produced']:,}", f"{r['deliveries']:,}", f"{r['distinct']:,}",
                    f"[bold]{r['lost']:,}[/bold]", f"{r['duplicates']:,}", f"{r['explained']:,}",
                    f"[bold]{r['unexplained']:,}[/bold]")
    console.print(records)
    if r["by_cause"]:
        console.print("duplicates by cause: " + ", ".join(f"{c} {n:,}" for c, n in r["by_cause"].items()))
    if r["lost_seqs"]:
        console.print(f"lost record ids (seq): {r['lost_seqs']}")
    for u in r["unexplained_seqs"][:10]:
        console.print(f"unexplained duplicate: {u}")
    for line in r["misread"][:10]:
        console.print(f"misread: {line}")
    for f in report["findings"]:
        label = f"known issue ({f['known']})" if f["known"] else "finding"
        console.print(f"{label}: {f['kind']}: {f['text']}", markup=False)
    why = failed(report)
    verdict = "[bold green]PASS[/bold green]" if not why else "[bold red]FAIL[/bold red]: " + "; ".join(why)
    console.print(verdict)
    console.print(f"replay: {report['replay']}", markup=False)
