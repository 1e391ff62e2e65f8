"""`regroup bench spark`: its data setup (fast) and a small end-to-end run (slow: starts Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from regroup.bench.spark import TOPIC, build_log, run_spark_bench, write_parquet
from regroup.log.embedded import EmbeddedLog
from regroup.spark.read import SPARK_ARROW_SCHEMA


def test_parquet_holds_exactly_the_logs_records(tmp_path: Path) -> None:
    log_dir, parquet_dir = str(tmp_path / "log"), str(tmp_path / "parquet")
    build_log(log_dir, 10_001, 3, 40)
    write_parquet(log_dir, parquet_dir)
    with EmbeddedLog(log_dir) as log:
        ends = log.end_offsets(TOPIC)
        assert ends == {0: 3334, 1: 3334, 2: 3333}
        from_log = [log.read_arrow(TOPIC, p, 0, n).cast(SPARK_ARROW_SCHEMA) for p, n in sorted(ends.items())]
    files = sorted(Path(parquet_dir).iterdir())
    assert [f.name for f in files] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    for batch, f in zip(from_log, files, strict=True):
        table = pq.read_table(f)
        assert table.schema.equals(SPARK_ARROW_SCHEMA)
        assert table.to_batches()[0].equals(batch)
    values = [v for b in from_log for v in b.column("value").to_pylist()]
    assert all(len(v) == 40 for v in values)
    assert len(set(values)) > 0.99 * len(values)  # nothing for Parquet to dictionary-encode away
    keys = [k for b in from_log for k in b.column("key").to_pylist()]
    assert len(set(keys)) == len(keys) == 10_001 and all(len(k) == 16 for k in keys)


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
def test_bench_reports_rates_and_a_ratio(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_spark_bench(100_000, 2, 100, True, runs=1, warmup=False, sink="agg",
                             directory=str(tmp_path))
    printed = json.loads(capsys.readouterr().out)  # stdout holds the JSON object and nothing else
    assert printed == result
    assert result["records"] == 100_000 and result["partitions"] == 2 and result["runs"] == 1
    for source in ("regroup", "parquet"):
        figures = result[source]
        assert figures["median_records_per_s"] > 0
        (run,) = figures["runs"]
        assert run["seconds"] > 0 and run["batches"] == 1
        assert run["execution_s"] <= run["seconds"]
    assert result["ratio"] > 0
    assert isinstance(result["target_met"], bool)
    # Both queries read the same rows (the bench raises otherwise) and all of them.
    assert result["checksum"]["rows"] == 100_000
    assert result["checksum"]["value_bytes"] == 100_000 * 100
    assert result["checksum"]["offset_sum"] == 2 * sum(range(50_000))
