"""`regroup bench assignors --java`: Kafka's Java assignors timed on regroup's grid cells."""

from __future__ import annotations

import shutil

import pytest

from regroup.bench import assignors as bench
from regroup.bench.assignors_java import JavaAssignors, JavaCell, sources_hash
from regroup.protocol.assignors import RangeAssignor, UniformAssignor, validate_assignment

SMALLEST = (100, 5, 10)  # members, partitions per member, topics: 500 partitions


class _FakeJava:
    """Stands in for the JVM: answers every cell with a fixed time and a full assignment."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str, int, int, int]] = []

    def measure(self, assignor: str, subscription: str, mode: str, members: int, ppm: int,
                topics: int) -> JavaCell:
        self.asked.append((assignor, subscription, mode, members, ppm, topics))
        partitions = members * ppm // topics * topics
        return JavaCell(best_ms=0.5, median_ms=0.6, best_cpu_ms=0.4, runs=5, warmup_runs=20,
                        partitions=partitions, assigned=partitions, members_out=members)


@pytest.fixture(autouse=True)
def _short_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    """regroup's side of ``--java`` spends 1 s per cell; a few short runs are enough here."""
    monkeypatch.setattr(bench, "_JAVA_CELL_BUDGET_S", 0.001)
    monkeypatch.setattr(bench, "_JAVA_MAX_RUNS", 3)


def test_run_grid_times_java_on_every_cell_and_reports_the_ratio() -> None:
    fake = _FakeJava()
    cells = bench.run_grid(False, java=fake, triples=[SMALLEST])  # type: ignore[arg-type]
    assert len(cells) == 8  # 2 assignors x 2 subscriptions x 2 modes
    assert fake.asked == [(c.assignor, c.subscription, c.mode, *SMALLEST) for c in cells]
    for c in cells:
        assert c.java_best_ms == 0.5 and c.java_best_cpu_ms == 0.4
        assert c.ratio == pytest.approx(c.best_ms / 0.5)
        assert c.best_cpu_ms is not None and c.cpu_ratio == pytest.approx(c.best_cpu_ms / 0.4)
        row = bench._cell_json(c)
        assert row["ratio"] == round(c.best_ms / 0.5, 3) and "java_median_ms" in row


def test_a_java_assignment_that_misses_partitions_is_an_error() -> None:
    class Short(_FakeJava):
        def measure(self, *args: object) -> JavaCell:
            got = super().measure(*args)  # type: ignore[arg-type]
            return JavaCell(**{**got.__dict__, "assigned": got.assigned - 1})

    with pytest.raises(RuntimeError, match="covers 499 of 500"):
        bench.run_grid(False, java=Short(), triples=[SMALLEST])  # type: ignore[arg-type]


def test_cells_without_java_keep_their_json_shape() -> None:
    cell = bench.Cell("uniform", "homogeneous", "full", 100, 5, 10, 500, 3, 0.1, 0.2, 0.1)
    row = bench._cell_json(cell)
    assert "java_best_ms" not in row and "ratio" not in row and row["best_ms"] == 0.1


def test_the_build_cache_key_follows_the_sources() -> None:
    assert sources_hash() == sources_hash()
    assert len(sources_hash()) == 16


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("java") is None or shutil.which("mvn") is None,
                    reason="needs Java 17+ and Maven")
def test_smallest_cell_through_kafkas_java_assignors() -> None:
    members, ppm, topics = SMALLEST
    with JavaAssignors(warmup_ms=50, measure_ms=50, min_runs=3, max_runs=20, warmup_calls=5) as java:
        assert java.info["kafka"] == "4.4.0"
        for name in bench.ASSIGNORS:
            for mode in bench.MODES:
                got = java.measure(name, "homogeneous", mode, members, ppm, topics)
                assert got.best_ms > 0 and got.median_ms >= got.best_ms and got.best_cpu_ms > 0
                assert (got.partitions, got.assigned, got.members_out) == (500, 500, members)
    # regroup's side of the same cell: a valid assignment of the same 500 partitions.
    metadata = bench.cell_metadata(members, ppm, topics)
    assert metadata is not None
    for assignor in (UniformAssignor(), RangeAssignor()):
        spec = bench.build_spec(assignor, metadata, members, False, True)
        result = validate_assignment(spec, assignor.assign(spec))
        assert len(result) == members and sum(map(len, result.values())) == 500
    timed = bench.measure("uniform", members, ppm, topics, False, False, budget_s=0.01)
    assert timed is not None and timed[0] == 500 and timed[2] > 0
