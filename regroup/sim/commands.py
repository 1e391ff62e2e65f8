"""`regroup sim ...`: the simulator's commands (mounted by regroup/cli.py as ``sim``).

Also runnable on its own: ``python -m regroup.sim.commands check --seeds 20``.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

sim_app = typer.Typer(help="Deterministic simulation: fault-injected checking and protocol comparison.",
                      no_args_is_help=True)


@sim_app.command("check")
def check(
    seeds: int = typer.Option(20, "--seeds", help="How many seeds to run."),
    start_seed: int = typer.Option(0, "--start-seed", help="The first seed of the sweep."),
    seed: int | None = typer.Option(None, "--seed", help="Replay one seed and print its event log."),
    duration: int = typer.Option(120, "--duration", help="Seconds of churn (faults) per seed."),
    events: int = typer.Option(12, "--events", help="Faults per seed."),
    stale_requests: bool = typer.Option(False, "--stale-requests",
                                        help="Let held-up requests arrive after their sender gave up."),
    key_ranges: bool = typer.Option(False, "--key-ranges",
                                    help="Key ranges: records carry keys, and the live group's parallelism "
                                         "changes under the faults (splits and merges), checked key by key."),
    splits: bool = typer.Option(False, "--splits",
                                help="Key ranges, and producer-side splits and merges of partitions under "
                                     "the faults too: records go to pieces, members read in lanes."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Run fault plans against the real protocol core and check the invariants at every event."""
    from regroup.sim.check import run_seed, sweep

    console = Console()
    if seed is not None:
        r = run_seed(seed, duration, events, record=True, stale_requests=stale_requests,
                     key_ranges=key_ranges, splits=splits)
        if json_output:
            print(json.dumps({**r.as_dict(), "plan": r.plan, "log": r.log}))
        else:
            for line in r.log:
                print(line)
            console.print(f"seed {seed}: {r.events} events, digest {r.digest[:16]}, "
                          + ("OK" if r.ok else f"{len(r.violations)} violation(s)"))
            for v in r.violations:
                console.print(f"  [red]{v}[/red]")
        raise typer.Exit(0 if r.ok else 1)
    key_ranges = key_ranges or splits
    summary = sweep(seeds, start_seed, duration, events, stale_requests, key_ranges, splits)
    if json_output:
        print(json.dumps(summary.as_dict()))
    else:
        for r in summary.failed:
            console.print(f"[red]seed {r.seed} FAILED[/red]: replay with  {r.replay}")
            for v in r.violations[:5]:
                console.print(f"    {v}")
        totals = summary.totals
        ranged = (f"{totals.get('parallelism_changes', 0)} parallelism changes, "
                  f"{totals.get('records_processed', 0)} records processed "
                  f"({totals.get('duplicates', 0)} again, after unclean hand-offs); " if key_ranges else "")
        if splits:
            ranged += (f"{totals.get('splits', 0)} splits and {totals.get('merges', 0)} merges of "
                       f"partitions, {totals.get('lanes_cut', 0)} lanes cut, "
                       f"{totals.get('commits_refused', 0)} commits refused; ")
        console.print(f"{summary.seeds} seeds ({start_seed}..{start_seed + seeds - 1}), "
                      f"{summary.events} events, {summary.virtual_s:.0f} s simulated in "
                      f"{summary.wall_s:.1f} s; {ranged}slowest settle {summary.max_settle_ms / 1000:.1f} s "
                      "after quiet; " + ("all invariants held" if not summary.failed
                                         else f"{len(summary.failed)} seed(s) failed"))
    raise typer.Exit(1 if summary.failed else 0)


@sim_app.command("compare")
def compare(
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    out: Path = typer.Option(Path("regroup-sim-compare"), "--out",
                             help="Directory for the plots and the Markdown table."),
    quick: bool = typer.Option(False, "--quick", help="Skip the 1,000-member scenario."),
    seeds: int = typer.Option(1, "--seeds", help="Seeds per scenario and protocol (means are shown)."),
    scenario: list[str] | None = typer.Option(None, "--scenario", help="Only these scenarios."),
) -> None:
    """Classic eager, classic cooperative, KIP-848 and regroup side by side, scenario by scenario."""
    from regroup.sim.compare import run_compare

    run_compare(json_output, out, quick, seeds, scenario)


@sim_app.command("streams")
def streams(
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    out: Path | None = typer.Option(None, "--out", help="Also write the table as Markdown (streams.md)."),
    seeds: int = typer.Option(1, "--seeds", help="Seeds per scenario and policy (means are shown)."),
    scenario: list[str] | None = typer.Option(None, "--scenario", help="Only these scenarios."),
    policy: list[str] | None = typer.Option(None, "--policy", help="Only these: cold, kip441, regroup."),
    tasks: int = typer.Option(12, "--tasks", help="Tasks (source partitions) in the group."),
    state_records: int = typer.Option(1_200_000, "--state-records", help="Records in each task's state."),
    restore_per_s: int = typer.Option(5_000, "--restore-per-s", help="Restore rate of one copy (records/s)."),
    probing_interval_s: int = typer.Option(600, "--probing-interval-s",
                                           help="KIP-441's probing rebalance interval (kip441 only)."),
) -> None:
    """Streams groups: cold moves, KIP-441 (probing rebalances) and regroup (promotion by event),
    scenario by scenario, with per-task unavailability; invariants checked during every run."""
    from regroup.sim.streams_compare import POLICIES, run_streams_compare
    from regroup.sim.streams_member import Policy, StreamsSimSettings

    try:
        policies = POLICIES if not policy else tuple(Policy(p) for p in policy)
        base = StreamsSimSettings(tasks=tasks, state_records=state_records, restore_per_s=restore_per_s,
                                  probing_interval_ms=probing_interval_s * 1000)
        rows = run_streams_compare(json_output, out, seeds, scenario, policies, base)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    raise typer.Exit(1 if any(r.violations for r in rows) else 0)


@sim_app.command("streams-check")
def streams_check(
    seeds: int = typer.Option(20, "--seeds", help="How many seeds to run."),
    start_seed: int = typer.Option(0, "--start-seed", help="The first seed of the sweep."),
    seed: int | None = typer.Option(None, "--seed", help="Replay one seed and print its plan and event log."),
    duration: int = typer.Option(600, "--duration", help="Seconds of faults per seed."),
    stale_requests: bool = typer.Option(False, "--stale-requests",
                                        help="Let held-up requests arrive after their sender gave up."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Streams groups under network faults, crashes and coordinator restarts: invariants, then liveness."""
    from regroup.sim.streams_check import replay_command, run_check, sweep

    console = Console()
    if seed is not None:
        r = run_check(seed, duration, stale_requests=stale_requests, record=True)
        if json_output:
            print(json.dumps({**r.as_dict(), "plan": r.plan, "log": r.log}))
        else:
            for line in [*r.plan, *r.log]:
                print(line)
            settle = ("did not settle" if r.settle_ms is None
                      else f"settled {r.settle_ms / 1000:.1f} s after quiet")
            console.print(f"seed {seed}: {r.events} events, digest {r.digest[:16]}, {settle}, "
                          + ("OK" if r.ok else f"{len(r.violations)} violation(s)"))
            for v in r.violations:
                console.print(f"  [red]{v}[/red]")
            if r.state:
                console.print(f"  state: {r.state}")
        raise typer.Exit(0 if r.ok else 1)
    summary = sweep(seeds, start_seed, duration, stale_requests)
    if json_output:
        print(json.dumps(summary.as_dict()))
    else:
        for r in summary.failed:
            why = "; ".join(r.violations[:3]) or "did not settle"
            console.print(f"[red]seed {r.seed} FAILED[/red] ({r.scenario}, {r.policy}): {why}\n"
                          f"    replay with  {replay_command(r.seed, stale_requests)}")
        console.print(f"{summary.seeds} seeds ({start_seed}..{start_seed + seeds - 1}), {summary.events} "
                      f"events in {summary.wall_s:.1f} s; slowest settle "
                      f"{summary.max_settle_ms / 1000:.1f} s after quiet; "
                      + ("all held" if not summary.failed else f"{len(summary.failed)} seed(s) failed"))
    raise typer.Exit(1 if summary.failed else 0)


if __name__ == "__main__":
    sim_app()
