"""The one `regroup` command. Thin: parses options and calls into the package."""

from __future__ import annotations

import typer

from regroup import admin
from regroup.sim.commands import sim_app

app = typer.Typer(help="regroup: next-generation consumer-group rebalancing.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks that print figures (add --json for machine-readable output).",
                        no_args_is_help=True)
app.add_typer(bench_app, name="bench")
app.add_typer(admin.groups_app, name="groups")
app.add_typer(admin.offsets_app, name="offsets")
app.add_typer(admin.topics_app, name="topics")
app.command("produce")(admin.produce)
app.command("coordinator")(admin.coordinator)
app.add_typer(sim_app, name="sim")


@bench_app.command("assignors")
def bench_assignors(
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    quick: bool = typer.Option(False, "--quick", help="A small slice of the grid (for smoke tests)."),
    java: bool = typer.Option(False, "--java", help="Also time Kafka's Java assignors on every cell, "
                                                    "in the same run, and print the ratio (needs "
                                                    "Java 17+ and Maven)."),
) -> None:
    """Time the uniform and range assignors on Kafka's benchmark grid (ms per assignment)."""
    from regroup.bench.assignors import run_assignor_bench

    run_assignor_bench(json_output=json_output, quick=quick, java=java)


@bench_app.command("heartbeat")
def bench_heartbeat(
    members: int = typer.Option(1000, help="Members in the group."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Cost of one steady heartbeat through the protocol core in a large stable group."""
    from regroup.bench.heartbeat import run_heartbeat_bench

    run_heartbeat_bench(members=members, json_output=json_output)


def bench_ranges(
    shape: str = typer.Option("parallel-consumer", help=(
        "parallel-consumer: 10,000 records of 1,000 keys, work uniform 0-5 ms, K = 1, 2, 4, 8, 16 as threads "
        "and as member processes (issue 11); fixed: 4,000 records of 64 keys, 1 ms each, threads only "
        "(the first version).")),
    records: int | None = typer.Option(None, min=100, help="Records in the one partition (default: the "
                                                            "shape's, 10,000 or 4,000)."),
    keys: int | None = typer.Option(None, min=1, help="Distinct keys (default: the shape's, 1,000 or 64)."),
    work_ms: float | None = typer.Option(None, min=0.0, help="Work per record (ms): parallel-consumer, the "
                                                             "mean of a uniform draw from 0 to twice it "
                                                             "(default 2.5); fixed, exactly it (default 1)."),
    workers: str | None = typer.Option(None, help="Comma-separated worker counts K besides 1 (K = 1 always "
                                                  "runs; default: 2,4,8,16 or 2,4,8)."),
    handlers: str = typer.Option("io,cpu", help="io (waits, releasing the GIL), cpu (pure-Python work), "
                                                "or both."),
    deployments: str = typer.Option("threads,members", help=(
        "parallel-consumer: threads (Consumer(workers=K)), members (K processes), or both.")),
    cpu_records: int = typer.Option(4_000, min=100, help="parallel-consumer: records of the cpu handler."),
    cpu_workers: str = typer.Option("2", help="parallel-consumer: K besides 1 for the cpu handler (one per "
                                              "core is what processes can use)."),
    seed: int = typer.Option(42, help="parallel-consumer: the seed of the records' work."),
    whole_ms: bool = typer.Option(False, "--whole-ms", help=(
        "parallel-consumer: whole milliseconds, the uniform draw rounded down (0-4 ms, mean 2), as "
        "parallel-consumer's own test sleeps ((long) (Math.random() * 5)).")),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """One hot partition drained by 1 member vs K members on K key ranges (threads or processes)."""
    from regroup.bench.key_ranges import (
        DEPLOYMENTS,
        HANDLERS,
        SHAPES,
        PcSettings,
        Settings,
        run_key_range_bench,
        run_parallel_consumer_bench,
    )

    def _counts(option: str, text: str) -> tuple[int, ...]:
        try:
            counts = tuple(int(n) for n in text.split(",") if n.strip())
        except ValueError:
            raise typer.BadParameter(f"{option} wants comma-separated integers, got {text!r}") from None
        if not counts or any(n < 2 or n > 1024 for n in counts):
            raise typer.BadParameter(f"{option}: each count must be 2..1024, got {text!r}")
        return counts

    def _choices(option: str, text: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
        chosen = tuple(h.strip() for h in text.split(",") if h.strip())
        if not chosen or any(c not in allowed for c in chosen):
            raise typer.BadParameter(f"{option}: choose from {', '.join(allowed)}, got {text!r}")
        return chosen

    if shape not in SHAPES:
        raise typer.BadParameter(f"--shape: choose from {', '.join(SHAPES)}, got {shape!r}")
    pc = shape == "parallel-consumer"
    counts = _counts("--workers", workers if workers is not None else "2,4,8,16" if pc else "2,4,8")
    kinds = _choices("--handlers", handlers, HANDLERS)
    if not pc:
        raise typer.Exit(run_key_range_bench(Settings(records or 4_000, keys or 64, 1.0 if work_ms is None
                                                      else work_ms, counts, kinds), json_output=json_output))
    deps = _choices("--deployments", deployments, tuple(DEPLOYMENTS))
    if "members" in deps and max(counts) > 64:
        raise typer.BadParameter(f"--workers: at most 64 member processes, got {workers!r}")
    cpu_counts = _counts("--cpu-workers", cpu_workers)
    settings = PcSettings(records=records or 10_000, keys=keys or 1_000,
                          mean_work_ms=2.5 if work_ms is None else work_ms, seed=seed, whole_ms=whole_ms,
                          workers=counts, deployments=deps, handlers=kinds, cpu_records=cpu_records,
                          cpu_workers=cpu_counts)
    raise typer.Exit(run_parallel_consumer_bench(settings, json_output=json_output))


bench_app.command("ranges")(bench_ranges)
bench_app.command("key-ranges", help="The same as `regroup bench ranges` (its first name).")(bench_ranges)


@app.command("demo")
def demo(
    members: int = typer.Option(3, min=2, help="Spark member processes at the start."),
    partitions: int | None = typer.Option(None, min=1, help="Partitions of the demo topic (the stateful "
                                                            "demo's tasks; default 6, stateless 12)."),
    rate: int | None = typer.Option(None, min=1, help="Records produced per second (default 300, "
                                                      "stateless 2000)."),
    duration: float | None = typer.Option(None, min=12, help="Seconds of workload, at least (events "
                                                             "spread over it; default 90, stateless 120)."),
    log: str | None = typer.Option(None, help="kafka://HOST:PORT to run on a Kafka cluster (default: "
                                              "the embedded log in the data directory)."),
    report: str | None = typer.Option(None, help="Directory for the report (PNG + HTML)."),
    keep: bool = typer.Option(False, help="Keep the data directory for inspection."),
    stateless: bool = typer.Option(False, "--stateless", help="Run the stateless PySpark demo (per-batch "
                                                              "aggregates, a consumer group) instead."),
    consumers: bool = typer.Option(False, "--consumers", help="Run the plain-Python consumer demo instead "
                                                              "of a PySpark one."),
    json_output: bool = typer.Option(False, "--json", help="Print the results as one JSON object."),
) -> None:
    """The main job: a stateful PySpark pipeline in a streams group scales out, in, rolls and survives
    kill -9, its state moving with its tasks; checked against the batch job."""
    if consumers and stateless:
        raise typer.BadParameter("choose one of --consumers and --stateless", param_hint="--stateless")
    if consumers:
        from regroup.demo.consumer_demo import run_consumer_demo

        result = run_consumer_demo(members, partitions or 12, rate or 2_000, duration or 120.0, json_output,
                                   keep)
    elif stateless:
        from regroup.demo.spark_demo import run_spark_demo

        result = run_spark_demo(members, partitions or 12, rate or 2_000, duration or 120.0, json_output,
                                keep, log, report)
    else:
        from regroup.demo.stateful_demo import run_stateful_demo
        from regroup.demo.stateful_demo.run import DURATION_S, PARTITIONS, RATE

        result = run_stateful_demo(members, partitions or max(PARTITIONS, members + 1), rate or RATE,
                                   duration or DURATION_S, json_output, keep, log, report)
    if result["lost"] or result.get("output_matches_batch_job") is False:
        raise typer.Exit(1)


@app.command("walkthrough")
def walkthrough(
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Narrate the protocol core on a small group: scale out, static restart, crash, topic growth."""
    from regroup.sim.walkthrough import run_walkthrough

    run_walkthrough(json_output=json_output)


@bench_app.command("rebalance")
def bench_rebalance(
    scenario: str = typer.Option("all", help="grow, scale-out or all."),
    added: int = typer.Option(900, help="Partitions added in the grow scenario."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Real consumer processes: a topic grows by 900 partitions; a group of 10 scales out by one."""
    from regroup.bench.rebalance import run_rebalance_bench

    if scenario not in ("grow", "scale-out", "all"):
        raise typer.BadParameter("choose grow, scale-out or all", param_hint="--scenario")
    run_rebalance_bench(scenario, json_output, added)


@bench_app.command("stateful")
def bench_stateful(
    sizes: str = typer.Option("10MB,100MB", help="State per task, comma-separated (KB, MB, GB); 1GB takes "
                                                 "long on a small machine."),
    scenario: str = typer.Option("all", help="scale-out (cold vs warm), kill (1 standby vs none) or all."),
    tasks: int = typer.Option(6, min=3, help="Tasks (partitions of the source topic)."),
    value_bytes: int = typer.Option(800, min=16, help="Bytes of state per key (keys = size / this)."),
    rate: float = typer.Option(50.0, min=0.1, max=1000, help="Records per second per task under load."),
    acceptable_lag: str = typer.Option("10000,100", help="--acceptable-recovery-lag of the warm scale-outs, "
                                                         "comma-separated: one run each (kills: the first)."),
    session_timeout_ms: int = typer.Option(3_000, min=500, help="Coordinator session timeout: the failure "
                                                                "detection time."),
    repeat: int = typer.Option(1, min=1, help="Rounds, each running every scenario of every size."),
    directory: str | None = typer.Option(None, help="Where to run (default: a temporary directory)."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Real streams members: unavailability of moved tasks, cold move vs warm-up, kill -9 with and
    without a standby, per state size."""
    from regroup.bench.stateful import KINDS, Settings, parse_size, run_stateful_bench

    kinds = list(KINDS) if scenario == "all" else [scenario]
    if any(k not in KINDS for k in kinds):
        raise typer.BadParameter("choose scale-out, kill or all", param_hint="--scenario")
    try:
        parsed = [parse_size(s) for s in sizes.split(",") if s.strip()]
        lags = tuple(int(x) for x in acceptable_lag.split(",") if x.strip())
        settings = Settings(tasks=tasks, value_bytes=value_bytes, rate_per_task=rate, acceptable_lags=lags,
                            session_timeout_ms=session_timeout_ms,
                            heartbeat_interval_ms=max(100, session_timeout_ms // 6))
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    run_stateful_bench(parsed, kinds, settings, json_output=json_output, repeat=repeat, directory=directory)


@bench_app.command("spark-stateful")
def bench_spark_stateful(
    sizes: str = typer.Option("10MB,100MB", help="State per task, comma-separated (KB, MB, GB). 1GB is "
                                                 "opt-in: building it takes long on a small machine "
                                                 "(tens of minutes on 2 cores)."),
    scenarios: str = typer.Option("all", help="Comma-separated: scale-out-cold, scale-out-warm, "
                                              "kill-standby, kill-no-standby, or the groups scale-out, "
                                              "kill, all."),
    tasks: int = typer.Option(4, min=2, help="Tasks (partitions of the source topic)."),
    value_bytes: int = typer.Option(10_000, min=1, help="Bytes of state per key (keys = size / this)."),
    rate: float = typer.Option(20.0, min=0.1, max=500, help="Records per second per task under load."),
    trigger_ms: int = typer.Option(500, min=50, help="Micro-batch trigger interval of every task query."),
    acceptable_lag: str = typer.Option("500,0", help="--acceptable-recovery-lag of the warm scale-outs, "
                                                     "comma-separated: one run each (kills: the first)."),
    session_timeout_ms: int = typer.Option(3_000, min=500, help="Coordinator session timeout: the failure "
                                                                "detection time."),
    directory: str | None = typer.Option(None, "--dir", help="Where to run (default: a temporary "
                                                             "directory)."),
    keep: bool = typer.Option(False, help="Keep every scenario's files (logs, checkpoints, outputs)."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Real Spark members (regroup.spark.streams, RocksDB state): no-output time of moved tasks, cold
    move vs warm-up, kill -9 with and without a standby, per state size."""
    from regroup.bench.spark_stateful import Settings, parse_size, run_spark_stateful_bench
    from regroup.bench.spark_stateful import scenarios as plan

    try:
        parsed = [parse_size(s) for s in sizes.split(",") if s.strip()]
        lags = tuple(int(x) for x in acceptable_lag.split(",") if x.strip())
        settings = Settings(tasks=tasks, value_bytes=value_bytes, rate_per_task=rate, trigger_ms=trigger_ms,
                            acceptable_lags=lags, session_timeout_ms=session_timeout_ms,
                            heartbeat_interval_ms=max(100, session_timeout_ms // 6))
        names = [s.strip() for s in scenarios.split(",") if s.strip()]
        plan(names, settings)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    result = run_spark_stateful_bench(parsed, names, settings, json_output=json_output, directory=directory,
                                      keep=keep)
    if result["lost"]:
        raise typer.Exit(1)


@bench_app.command("log")
def bench_log(
    directory: str | None = typer.Option(None, help="Where to write (default: a temporary directory)."),
    records: int = typer.Option(1_000_000, min=1, help="Records to produce and read."),
    value_size: int = typer.Option(100, min=0, help="Bytes per value."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Produce and read throughput of the embedded log."""
    from regroup.bench.log import run_log_bench

    run_log_bench(directory, records, value_size, json_output)


def _process_counts(text: str, what: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"comma-separated counts, got {text!r}", param_hint=what) from None
    if not out or any(n < 1 or n > 64 for n in out):
        raise typer.BadParameter(f"counts must be 1..64, got {text!r}", param_hint=what)
    return out


@bench_app.command("split")
def bench_split(
    records: int = typer.Option(400_000, min=1000, help="Records in the hot partition."),
    value_size: int = typer.Option(100, min=8, help="Bytes per value."),
    readers: str = typer.Option("1,2,4,8", help="Reader counts K, comma-separated (each owns 1/K of "
                                                "the keys)."),
    producers: str = typer.Option("1,2,4", help="Producer counts, comma-separated."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Producer-side split vs client-side filtering of one hot partition: read amplification,
    records/s and CPU per record for K readers, and parallel producers (embedded log)."""
    from regroup.bench.split import run_split_bench

    run_split_bench(records, value_size, _process_counts(readers, "--readers"),
                    _process_counts(producers, "--producers"), json_output)


@bench_app.command("spark")
def bench_spark(
    records: int = typer.Option(4_000_000, min=1, help="Records in the topic (and in the Parquet copy)."),
    partitions: int = typer.Option(8, min=1, help="Partitions of the topic."),
    value_size: int = typer.Option(100, min=0, help="Bytes per value."),
    runs: int = typer.Option(3, min=1, help="Measurements of each side, interleaved; medians reported."),
    sink: str = typer.Option("noop", help="noop (every column consumed) or agg (checksums compared)."),
    warmup: bool = typer.Option(True, "--warmup/--no-warmup", help="One untimed query of each side first."),
    arrow_unchecked: bool = typer.Option(False, help="Start the JVM without Arrow's bounds/null checks."),
    directory: str | None = typer.Option(None, help="Where to write (default: a temporary directory)."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Records/s of one streaming query on the regroup source vs Spark reading the same rows from Parquet."""
    from regroup.bench.spark import SINKS, run_spark_bench

    if sink not in SINKS:
        raise typer.BadParameter(f"choose one of {sorted(SINKS)}", param_hint="--sink")
    run_spark_bench(records, partitions, value_size, json_output, runs=runs, warmup=warmup,
                    directory=directory, sink=sink, arrow_unchecked=arrow_unchecked)


@bench_app.command("coordinator")
def bench_coordinator(
    members: int = typer.Option(10_000, help="Members heartbeating (largest step of the sweep)."),
    interval_ms: int = typer.Option(5_000, help="Heartbeat interval of every member."),
    duration: float = typer.Option(10.0, help="Seconds measured per window."),
    sweep: bool = typer.Option(True, "--sweep/--no-sweep", help="Also measure smaller groups."),
    group_size: int = typer.Option(500, help="Members per group."),
    processes: int = typer.Option(1, help="Load-generating processes."),
    compare_unary: bool = typer.Option(True, "--compare-unary/--no-compare-unary",
                                       help="Also measure one unary call per heartbeat."),
    dashboard_clients: int = typer.Option(0, "--dashboard-clients", min=0,
                                          help="Also measure the target with N dashboard pages open."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Heartbeats/s and p50/p99 against one durable coordinator process; finds saturation."""
    from regroup.bench.coordinator import run_coordinator_bench

    run_coordinator_bench(members, interval_ms, duration, json_output, sweep=sweep, group_size=group_size,
                          processes=processes, compare_unary=compare_unary,
                          dashboard_clients=dashboard_clients)


@bench_app.command("failover")
def bench_failover(
    runs: int = typer.Option(8, min=1, help="Members killed with kill -9, with the failover grace on."),
    baseline_runs: int = typer.Option(2, min=0, help="Kills with the grace off (each waits a session "
                                                     "timeout); 0 skips the baseline."),
    members: int = typer.Option(3, min=2, help="Dynamic members (processes) of each kind."),
    partitions: int = typer.Option(6, min=2, help="Partitions of the topic."),
    grace_ms: int = typer.Option(2_000, min=1, help="The coordinator's --failover-grace-ms."),
    session_timeout_ms: int = typer.Option(10_000, min=500, help="The coordinator's session timeout."),
    kind: str = typer.Option("both", help="Members measured: consumer, spark (PySpark queries) or both."),
    spark_trigger_ms: int = typer.Option(500, min=1, help="The Spark members' processing-time trigger."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Real processes: kill -9 a member (a consumer, or a PySpark application with its query), time
    until each of its partitions is processed again by another member — with the failover grace and
    without it (the session timeout)."""
    from regroup.bench.failover import KINDS, Settings, run_failover_bench

    try:
        kinds = KINDS if kind == "both" else (kind,)
        settings = Settings(members=members, partitions=partitions, runs=runs, baseline_runs=baseline_runs,
                            grace_ms=grace_ms, session_timeout_ms=session_timeout_ms,
                            heartbeat_interval_ms=min(2_000, session_timeout_ms // 3),
                            kinds=kinds, spark_trigger_ms=spark_trigger_ms)  # type: ignore[arg-type]
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    run_failover_bench(settings, json_output=json_output)


@bench_app.command("vs-kafka")
def bench_vs_kafka(
    scenarios: str = typer.Option("grow,kill,scale-out,rolling",
                                  help="Comma-separated: grow, kill, scale-out, scale-out-100, rolling."),
    runs: int = typer.Option(1, min=1, help="Runs of every scenario for every system."),
    members: int = typer.Option(10, min=2, help="Members of each group (one process each)."),
    grow_by: int = typer.Option(900, min=1, help="grow: partitions added to a 10-partition topic."),
    session_timeout_ms: int = typer.Option(10_000, min=6_000, help="Session timeout of all three systems."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """regroup vs Apache Kafka's group coordinator (new protocol, classic cooperative-sticky) on one
    local Kafka 4.4 broker: topic growth, kill -9, scale-out under load, rolling restart."""
    from regroup.bench.vs_kafka import SCENARIOS, Settings, run_vs_kafka_bench

    chosen = tuple(x.strip() for x in scenarios.split(",") if x.strip())
    if not chosen or any(x not in SCENARIOS for x in chosen):
        raise typer.BadParameter(f"--scenarios: choose among {', '.join(SCENARIOS)}")
    run_vs_kafka_bench(chosen, runs, json_output,
                       Settings(members=members, grow_by=grow_by, session_ms=session_timeout_ms))


chaos_app = typer.Typer(help="Chaos testing of a real coordinator process.", no_args_is_help=True)
app.add_typer(chaos_app, name="chaos")


@chaos_app.command("fuzz")
def chaos_fuzz(
    requests: int = typer.Option(2_000, "--requests", min=1, help="Requests to send."),
    seed: int = typer.Option(0, "--seed", help="Seed of the generator (the same seed, the same choices; "
                                               "plausible requests also follow the answers)."),
    address: str | None = typer.Option(None, "--address", help="HOST:PORT of a running coordinator (default: "
                                                              "start one in a temporary data dir)."),
    deadline: float = typer.Option(10.0, "--deadline", min=0.1, help="Seconds a request may take (a hang)."),
    keep: bool = typer.Option(False, "--keep", help="Keep the started coordinator's data dir and log."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Fuzz every gRPC method (structured, plausible, inconsistent and raw requests) with a well-behaved
    member alongside, then check the store replays; exit status 1 on any finding."""
    import sys

    from regroup.chaos.fuzz import dumps, print_report, run_fuzz, total_findings

    report = run_fuzz(requests, seed, address=address, deadline_s=deadline, keep=keep,
                      progress=None if json_output else lambda line: print(line, file=sys.stderr))
    if json_output:
        print(dumps(report))
    else:
        print_report(report)
    if total_findings(report):
        raise typer.Exit(1)


@chaos_app.command("soak")
def chaos_soak(
    minutes: float = typer.Option(5.0, "--minutes", min=0.1, help="Minutes of faults (then a drain and the "
                                                                  "check)."),
    seed: int | None = typer.Option(None, "--seed", help="Seed of the fault schedule (default: drawn and "
                                                         "printed; the same seed and options replay the same "
                                                         "faults)."),
    members: int = typer.Option(3, "--members", min=1, help="Consumer member processes (even ones static)."),
    spark_members: int = typer.Option(0, "--spark-members", min=0, help="PySpark member processes (slow to "
                                                                        "start)."),
    partitions: int = typer.Option(6, "--partitions", min=1, help="Partitions of the soak's topic."),
    rate: int = typer.Option(200, "--rate", min=1, help="Records produced per second."),
    faults: str | None = typer.Option(None, "--faults", help=(
        "Comma-separated fault kinds to draw from (default all): member-kill, member-pause, connection-cut, "
        "coordinator-kill, coordinator-pause, disk-full, store-corrupt.")),
    directory: str | None = typer.Option(None, "--dir", help="Where to run (default: a temporary "
                                                             "directory)."),
    keep: bool = typer.Option(False, "--keep", help="Keep the files (logs, outputs, damaged store files)."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """A coordinator, consumer and PySpark members on a steady keyed load, with seeded random faults; then
    every record is checked: lost = 0, each duplicate explained. Exit status 1 on a failure."""
    import random

    from regroup.chaos.soak import Settings, dumps, print_report, run_soak
    from regroup.chaos.soak_schedule import parse_kinds

    try:
        kinds = parse_kinds(faults)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    settings = Settings(minutes=minutes, seed=random.randrange(2**31) if seed is None else seed,
                        members=members, spark_members=spark_members, partitions=partitions, rate=rate,
                        kinds=kinds)
    report = run_soak(settings, directory=directory, keep=keep)
    if json_output:
        print(dumps(report))
    else:
        print_report(report)
    if not report["ok"]:
        raise typer.Exit(1)


@chaos_app.command("abuse")
def chaos_abuse(
    abusers: int = typer.Option(6, "--abusers", min=0, help="Abusive client processes."),
    seconds: float = typer.Option(30.0, "--seconds", min=1.0, help="Seconds of abuse."),
    members: int = typer.Option(3, "--members", min=1, help="Well-behaved members (the first commits)."),
    heartbeat_interval_ms: int = typer.Option(1_000, "--heartbeat-interval-ms", min=100,
                                              help="The coordinator's heartbeat interval: the deadline."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Abusive clients send the largest legal heartbeats (1,000,000 owned partitions) while well-behaved
    members heartbeat and commit; prints their latency; exit status 1 if one was starved or refused."""
    import sys

    from regroup.chaos.abuse import Settings, dumps, print_report, run_abuse

    report = run_abuse(Settings(abusers=abusers, seconds=seconds, members=members,
                                heartbeat_interval_ms=heartbeat_interval_ms),
                       progress=None if json_output else lambda line: print(line, file=sys.stderr))
    if json_output:
        print(dumps(report))
    else:
        print_report(report)
    if not report["ok"]:
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
