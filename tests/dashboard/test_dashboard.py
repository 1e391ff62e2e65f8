"""The dashboard in a real browser against a real coordinator: members joining, partitions moving, a
member killed, all drawn live (no reload) from the event stream, with no console errors; a streams
group's tasks by role, a warm-up catching up and taking its task over, and a group that cannot run.

Real consumer processes (``regroup.demo.worker``) for the story of a group; members driven through the
rpc client where the test must hold a rebalance half-way (a revocation not yet released), and for
streams members.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from regroup.log import LogRecord, open_log
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import OffsetCommitRequest
from regroup.protocol.shard import Shard
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.messages import StreamsHeartbeatRequest, StreamsHeartbeatResponse
from regroup.protocol.streams.topology import TaskId, Topology
from regroup.rpc.client import CoordinatorClient
from tests.coordinator.server_proc import ServerProc, start_server
from tests.coordinator.test_server import M, settle
from tests.dashboard.conftest import Tab

# Slow, and one Chromium at a time on a 2-core machine (the xdist group keeps them on one worker).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]

PARTITIONS = 4
#: A short session so that a killed member is fenced within seconds.
SHORT_SESSION = ("--session-timeout-ms", "3000", "--heartbeat-interval-ms", "500")
#: Condition waits only; generous, for a loaded machine.
WAIT_MS = 45_000
#: Where the docs' screenshot goes when REGROUP_DOCS_SCREENSHOT=1 (written once, by hand, not in CI).
DOCS_SCREENSHOT = Path(__file__).parents[2] / "docs" / "img" / "dashboard.png"


@dataclass
class Cluster:
    tmp: Path
    server: ServerProc
    log_dir: Path
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        assert self.server.dashboard_url is not None, "the coordinator did not say where its dashboard is"
        return self.server.dashboard_url

    def produce(self, per_partition: int) -> None:
        log = open_log(str(self.log_dir))
        try:
            for p in range(PARTITIONS):
                log.produce("orders", p, [LogRecord(None, b"x", 0)] * per_partition)
        finally:
            log.close()

    def start_worker(self, name: str) -> None:
        args = [sys.executable, "-m", "regroup.demo.worker", self.server.address, str(self.log_dir), "g",
                str(self.tmp / f"{name}.out")]
        self.workers[name] = subprocess.Popen(args, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                              stderr=open(self.tmp / f"{name}.err", "ab"))  # noqa: SIM115

    def kill9(self, name: str) -> None:
        proc = self.workers.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def member_ids(self) -> set[str]:
        with CoordinatorClient(self.server.address) as c:
            if "g" not in {g for g, _, _ in c.list_groups()}:
                return set()
            return {m.member_id for m in c.describe_group("g").description.members}


def _cluster(tmp_path: Path, *coord_args: str) -> Cluster:
    log_dir = tmp_path / "log"
    log = open_log(str(log_dir))
    log.create_topic("orders", PARTITIONS)
    log.close()
    server = start_server(tmp_path / "coord", "--log", str(log_dir), "--http", "127.0.0.1:0", *coord_args)
    return Cluster(tmp_path, server, log_dir)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = _cluster(tmp_path, *SHORT_SESSION)
    yield c
    for proc in c.workers.values():
        proc.kill()
        proc.wait(timeout=10)
    c.server.proc.kill()
    c.server.proc.wait(timeout=10)


def new_member(c: Cluster, known: set[str]) -> str:
    """The id of the member that joined after ``known`` (read from the coordinator, not the page)."""
    return _poll(lambda: next(iter(c.member_ids() - known), None), "a new member")


def _poll(value: Callable[[], str | None], what: str) -> str:
    deadline = time.monotonic() + WAIT_MS / 1000
    while (v := value()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return v


def owned_by(page: Page, member: str) -> Locator:
    return page.locator(f'#grid td[data-member="{member}"][data-cell="owned"]')


def step(page: Page, member: str, name: str) -> Locator:
    return page.locator(f'#timeline li[data-step="{name}"][data-member="{member}"]')


def test_a_group_joins_rebalances_and_loses_a_member_live(cluster: Cluster, tab: Tab) -> None:
    page = tab.page
    cluster.produce(50)
    page.goto(cluster.url)
    expect(page.locator("#live")).to_have_attribute("data-live", "live", timeout=WAIT_MS)
    expect(page.locator("#no-groups")).to_be_visible()
    # Any reload or navigation away would lose this: every later change must arrive live.
    page.evaluate("window.__sameDocument = true")

    # A member joins: the list shows the group without a reload.
    cluster.start_worker("a")
    row = page.locator('#groups tr[data-group="g"]')
    expect(row).to_be_visible(timeout=WAIT_MS)
    a = new_member(cluster, set())
    members_cell = row.locator('td[data-col="members"]')
    expect(members_cell).to_have_text("1", timeout=WAIT_MS)
    row.get_by_role("link", name="g").click()
    expect(page.locator("#group-id")).to_have_text("g")
    expect(page.locator("#members tbody tr")).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator(f'#members tr[data-member="{a}"] .badge')).to_have_text("stable", timeout=WAIT_MS)
    expect(owned_by(page, a)).to_have_count(PARTITIONS, timeout=WAIT_MS)
    expect(step(page, a, "joined")).to_have_count(1)
    # It processes and commits everything: the grid's lag column reaches 0 on every partition.
    expect(page.locator("#grid tbody tr td:last-child")).to_have_text(["0"] * PARTITIONS, timeout=WAIT_MS)
    tab.shot("1-one-member")

    # A second member joins: partitions move from a to b, revoking -> released -> granted, live.
    cluster.start_worker("b")
    b = new_member(cluster, {a})
    expect(page.locator("#members tbody tr")).to_have_count(2, timeout=WAIT_MS)
    expect(step(page, b, "granted")).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("#group-state")).to_have_text("stable", timeout=WAIT_MS)
    expect(owned_by(page, b)).to_have_count(PARTITIONS // 2, timeout=WAIT_MS)
    expect(owned_by(page, a)).to_have_count(PARTITIONS // 2, timeout=WAIT_MS)
    # Newest first: b's grant, then a's release, then a's revocation.
    order = page.locator("#timeline li.step").evaluate_all(
        "lis => lis.map(li => li.dataset.member + ' ' + li.dataset.step)")
    assert order.index(f"{b} granted") < order.index(f"{a} released") < order.index(f"{a} revoking"), order
    granted = page.locator(f'#timeline li[data-step="granted"][data-member="{b}"]')
    expect(granted).to_contain_text("hand-off")
    moved = set(page.locator(f'#grid td[data-member="{b}"][data-cell="owned"]').evaluate_all(
        "tds => tds.map(td => td.parentElement.dataset.partition)"))
    for p in moved:
        expect(granted).to_contain_text(p)
        expect(step(page, a, "revoking")).to_contain_text(p)
    tab.shot("2-partitions-moved")

    # b is killed: fenced after its session timeout; a takes everything back.
    cluster.kill9("b")
    expect(step(page, b, "fenced")).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("#members tbody tr")).to_have_count(1, timeout=WAIT_MS)
    expect(owned_by(page, a)).to_have_count(PARTITIONS, timeout=WAIT_MS)
    expect(page.locator("#timeline li.bump").first).to_contain_text("epoch")
    tab.shot("3-member-fenced")

    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
    assert tab.errors == []


@pytest.fixture
def held_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Default (long) sessions: the test's own members beat only when it says so. Streams groups keep
    one standby per task, and a copy within 100 records of the commits may take its task over."""
    c = _cluster(tmp_path, "--standby-replicas", "1", "--acceptable-recovery-lag", "100")
    yield c
    c.server.proc.kill()
    c.server.proc.wait(timeout=10)


def test_a_rebalance_half_way_shows_revoking_and_waiting(held_cluster: Cluster, tab: Tab) -> None:
    page = tab.page
    c = CoordinatorClient(held_cluster.server.address, client_id="dashboard-test", timeout_s=10)
    try:
        m1, m2 = M("orders-app", "consumer-1"), M("orders-app", "consumer-2")
        m1.join(c)
        settle(c, [m1])
        m2.join(c)
        settle(c, [m1, m2])
        held_cluster.produce(1200)
        for m in (m1, m2):
            offsets = {s: 900 + 40 * s.partition for s in m.owned}
            ack = c.commit_offsets(OffsetCommitRequest("orders-app", m.id, m.epoch, offsets))
            assert ack.ok, ack.message

        page.goto(held_cluster.url + "#/group/" + "orders-app")
        expect(page.locator("#live")).to_have_attribute("data-live", "live", timeout=WAIT_MS)
        expect(page.locator("#members tbody tr")).to_have_count(2, timeout=WAIT_MS)
        page.evaluate("window.__sameDocument = true")

        # A third member joins; the others are told to give partitions up but have not released them.
        m3 = M("orders-app", "consumer-3")
        m3.join(c)
        m1.beat(c)
        m2.beat(c)
        revoking = page.locator('#grid td[data-cell="revoking"]')
        awaiting = page.locator(f'#grid td[data-member="{m3.id}"][data-cell="awaiting"]')
        expect(revoking.first).to_be_visible(timeout=WAIT_MS)
        expect(awaiting.first).to_be_visible(timeout=WAIT_MS)
        expect(page.locator(f'#members tr[data-member="{m3.id}"] .badge')).to_have_text("waiting")
        expect(page.locator('#members .badge', has_text="revoking").first).to_be_visible()
        expect(page.locator("#group-state")).to_have_text("reconciling")
        expect(page.locator(f'#timeline li[data-step="revoking"][data-member="{m1.id}"]')).to_have_count(1)
        # Lag = end offset (1200) - committed (900 + 40 * partition), per partition.
        expect(page.locator("#grid tbody tr td:last-child")).to_have_text(["300", "260", "220", "180"])
        shot = tab.shot("mid-rebalance")
        if os.environ.get("REGROUP_DOCS_SCREENSHOT") == "1":
            DOCS_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(DOCS_SCREENSHOT), full_page=True)
            print(f"docs screenshot: {DOCS_SCREENSHOT} (from {shot})")

        # They release; the newcomer is granted what they gave up, with the hand-off's duration.
        settle(c, [m1, m2, m3])
        expect(revoking).to_have_count(0, timeout=WAIT_MS)
        expect(page.locator('#grid td[data-cell="awaiting"]')).to_have_count(0, timeout=WAIT_MS)
        granted = page.locator(f'#timeline li[data-step="granted"][data-member="{m3.id}"]')
        expect(granted).to_have_count(1, timeout=WAIT_MS)
        expect(granted).to_contain_text("hand-off")
        expect(page.locator(f'#timeline li[data-step="released"][data-member="{m1.id}"]')).to_contain_text(
            "ms after the request")
        m3_owns = page.locator(f'#grid td[data-member="{m3.id}"][data-cell="owned"]')
        expect(m3_owns).to_have_count(len(m3.owned))
        tab.shot("settled")

        _streams_group_live(page, c, tab)
        assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
        assert tab.errors == []
    finally:
        c.close()


COUNT = Topology.of({"count": ["orders"]})
ALL_TASKS = frozenset(TaskId("count", p) for p in range(PARTITIONS))


def _beat(c: CoordinatorClient, member: str, epoch: int, *, reached: int | None = None,
          owned: MemberTasks | None = None, process: str | None = None, group: str = "counts",
          topology: Topology | None = None) -> StreamsHeartbeatResponse:
    """A streams member's heartbeat (a join with ``process``), reporting every task copy of its process
    at offset ``reached`` of orders when given."""
    offsets = None if reached is None else {t: {Shard("orders", t.partition): reached} for t in ALL_TASKS}
    r = c.streams_heartbeat(StreamsHeartbeatRequest(
        group, member, epoch, process_id=process, rebalance_timeout_ms=30_000 if epoch == 0 else None,
        topology=COUNT if epoch == 0 and topology is None else topology, owned=owned, task_offsets=offsets))
    assert r.error is ErrorCode.NONE, r.message
    return r


def _streams_group_live(page: Page, c: CoordinatorClient, tab: Tab) -> None:
    """A streams group on the same page: listed with its kind, each member's role per task with its
    copy's lag, a warm-up catching up and taking its task over (live), soft lags re-read; and a streams
    group that cannot run, with why."""
    a = _beat(c, "a", 0, process="P1")
    b = _beat(c, "b", 0, process="P2")
    assert b.assignment is not None and len(b.assignment.warmup) == 2
    warming = sorted(str(t) for t in b.assignment.warmup)
    committed = {Shard("orders", p): 1000 for p in range(PARTITIONS)}
    assert c.commit_offsets(OffsetCommitRequest("counts", "a", a.member_epoch, committed)).ok
    a = _beat(c, "a", a.member_epoch, reached=1000)
    b = _beat(c, "b", b.member_epoch, reached=200)  # P2's copies are 800 behind
    _beat(c, "x", 0, process="P9", group="broken", topology=Topology.of({"join": ["clicks"]}))

    page.locator(".crumbs a").click()
    expect(page.locator('#groups tr[data-group="counts"] td[data-col="kind"]')).to_have_text(
        "streams", timeout=WAIT_MS)
    expect(page.locator('#groups tr[data-group="orders-app"] td[data-col="kind"]')).to_have_text("consumer")
    expect(page.locator('#groups tr[data-group="broken"] td[data-col="state"]')).to_have_text("not ready")
    page.get_by_role("link", name="broken", exact=True).click()
    expect(page.locator("#not-ready")).to_contain_text("clicks", timeout=WAIT_MS)
    expect(page.locator("#group-ready")).to_have_text("no")
    tab.shot("streams-not-ready")
    page.locator(".crumbs a").click()
    page.get_by_role("link", name="counts", exact=True).click()

    expect(page.locator("#group-topology")).to_have_text("count ← orders", timeout=WAIT_MS)
    expect(page.locator('#grid td[data-member="a"][data-cell="active"]')).to_have_count(PARTITIONS)
    warmups = page.locator('#grid td[data-member="b"][data-cell="warmup"]')
    expect(warmups).to_have_count(2)
    for t in warming:
        expect(page.locator(f'#grid tr[data-task="{t}"] td[data-member="b"]')).to_contain_text(
            "warm-up · lag 800, takes over at ≤ 100")
    standbys = page.locator('#grid td[data-member="b"][data-cell="standby"]')
    expect(standbys).to_have_count(2)
    expect(standbys.first).to_contain_text("standby · lag 800")
    expect(page.locator("#members tbody tr")).to_have_count(2)
    expect(page.locator("#not-ready")).to_have_count(0)
    expect(page.locator("main")).not_to_contain_text("null")  # nothing left out is drawn as a word
    tab.shot("streams-warming-up")

    # P2's copies catch up: the epoch moves (live, from the event stream), b awaits its new actives.
    b = _beat(c, "b", b.member_epoch, reached=950)
    expect(page.locator("#group-epoch")).to_have_text("3", timeout=WAIT_MS)
    expect(page.locator('#grid td[data-member="b"][data-cell="warmup awaiting"]')).to_have_count(2)
    expect(page.locator("#timeline li.bump", has_text="caught up").first).to_be_visible()
    # a gives the two tasks up (keeping standbys of them), then b takes them over.
    a = _beat(c, "a", a.member_epoch, owned=MemberTasks(ALL_TASKS))
    expect(page.locator('#grid td[data-member="a"][data-cell="revoking awaiting"]')).to_have_count(
        2, timeout=WAIT_MS)
    a = _beat(c, "a", a.member_epoch, owned=a.assignment)
    b = _beat(c, "b", b.member_epoch)
    expect(page.locator("#group-state")).to_have_text("stable", timeout=WAIT_MS)
    for t in warming:
        expect(page.locator(f'#grid tr[data-task="{t}"] td[data-member="b"]')).to_have_attribute(
            "data-cell", "active")
    # A lag report writes no record and sends no event: the page re-reads it (every 5 s).
    _beat(c, "b", b.member_epoch, reached=1000)
    expect(standbys.first).to_contain_text("standby · lag 0", timeout=WAIT_MS)
    tab.shot("streams-moved")


def test_with_a_token_the_link_lets_the_page_in(tmp_path: Path, tab: Tab) -> None:
    server = start_server(tmp_path / "coord", "--http", "127.0.0.1:0", "--token", "s3cret")
    try:
        assert server.dashboard_url is not None
        page = tab.page
        page.goto(server.dashboard_url + "?token=s3cret")
        assert page.url == server.dashboard_url  # the cookie is set and the token left the address bar
        expect(page.locator("#no-groups")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#live")).to_have_attribute("data-live", "live", timeout=WAIT_MS)
        assert tab.errors == []
    finally:
        tab.page.context.close()
        assert server.terminate() == 0, server.log()


def test_a_group_id_is_text_however_odd(held_cluster: Cluster, tab: Tab) -> None:
    """Ids come from clients: a slash, spaces and markup in one are shown as they are, never run."""
    gid = 'team a/<b id="injected">x</b> & "y"'
    page = tab.page
    page.goto(held_cluster.url)
    expect(page.locator("#live")).to_have_attribute("data-live", "live", timeout=WAIT_MS)
    with CoordinatorClient(held_cluster.server.address, client_id="dashboard-test", timeout_s=10) as c:
        m = M(gid, "<i>m1</i>")
        m.join(c)
        settle(c, [m])
    link = page.get_by_role("link", name=gid, exact=True)
    expect(link).to_be_visible(timeout=WAIT_MS)
    link.click()
    expect(page.locator("#group-id")).to_have_text(gid, timeout=WAIT_MS)
    expect(page.locator('#members th[scope="row"]')).to_have_text(["<i>m1</i>"])
    expect(page.locator("#injected")).to_have_count(0)
    expect(page.locator("main i")).to_have_count(0)
    assert tab.errors == []
