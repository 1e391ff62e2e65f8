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
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Run fault plans against the real protocol core and check the invariants at every event."""
    from regroup.sim.check import run_seed, sweep

    console = Console()
    if seed is not None:
        r = run_seed(seed, duration, events, record=True, stale_requests=stale_requests)
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
    summary = sweep(seeds, start_seed, duration, events, stale_requests)
    if json_output:
        print(json.dumps(summary.as_dict()))
    else:
        for r in summary.failed:
            console.print(f"[red]seed {r.seed} FAILED[/red]: replay with  {r.replay}")
            for v in r.violations[:5]:
                console.print(f"    {v}")
        console.print(f"{summary.seeds} seeds ({start_seed}..{start_seed + seeds - 1}), "
                      f"{summary.events} events, {summary.virtual_s:.0f} s simulated in "
                      f"{summary.wall_s:.1f} s; slowest settle {summary.max_settle_ms / 1000:.1f} s "
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


if __name__ == "__main__":
    sim_app()
