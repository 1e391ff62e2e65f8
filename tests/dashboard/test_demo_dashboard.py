"""The demos turn the dashboard on and point to it (no browser needed here)."""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from pathlib import Path

from regroup.demo.common import start_demo_coordinator, stop_coordinator
from regroup.demo.report import ReportData, write_report


def test_the_demo_coordinator_serves_the_dashboard(tmp_path: Path) -> None:
    proc, addr, url = start_demo_coordinator(tmp_path, str(tmp_path / "log"), 10_000, 2_000)
    try:
        assert addr.startswith("127.0.0.1:") and url.startswith("http://127.0.0.1:") and url.endswith("/")
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
        with urllib.request.urlopen(url + "api/groups", timeout=10) as r:
            assert json.loads(r.read()) == {"groups": []}
    finally:
        stop_coordinator(proc)
    assert proc.returncode == 0


def test_the_report_links_to_the_dashboard(tmp_path: Path) -> None:
    base = ReportData(title="t", t0=0.0, partitions=1,
                      ownership=[(0.0, {0: "m1"}, frozenset()), (1.0, {0: "m1"}, frozenset())],
                      batches={"m1": [(0.5, 10)]}, events=[], summary=[("lost", "0")], event_header=["event"],
                      event_rows=[])
    linked = dataclasses.replace(base, dashboard_url="http://127.0.0.1:8123/")
    page = Path(write_report(tmp_path / "a", linked)["html"])
    assert '<a href="http://127.0.0.1:8123/">' in page.read_text()
    page = Path(write_report(tmp_path / "b", base)["html"])
    assert "dashboard" not in page.read_text()
