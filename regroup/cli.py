"""The one `regroup` command. Thin: parses options and calls into the package."""

from __future__ import annotations

import typer

app = typer.Typer(help="regroup: next-generation consumer-group rebalancing.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks that print figures (add --json for machine-readable output).",
                        no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("assignors")
def bench_assignors(
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    quick: bool = typer.Option(False, "--quick", help="A small slice of the grid (for smoke tests)."),
) -> None:
    """Time the uniform and range assignors on Kafka's benchmark grid (ms per assignment)."""
    from regroup.bench.assignors import run_assignor_bench

    run_assignor_bench(json_output=json_output, quick=quick)


@bench_app.command("heartbeat")
def bench_heartbeat(
    members: int = typer.Option(1000, help="Members in the group."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Cost of one steady heartbeat through the protocol core in a large stable group."""
    from regroup.bench.heartbeat import run_heartbeat_bench

    run_heartbeat_bench(members=members, json_output=json_output)


@app.command("walkthrough")
def walkthrough(
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Narrate the protocol core on a small group: scale out, static restart, crash, topic growth."""
    from regroup.sim.walkthrough import run_walkthrough

    run_walkthrough(json_output=json_output)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
