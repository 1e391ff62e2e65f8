"""`regroup groups list/describe` print what clients chose literally: rich markup in a group id, a
member id, an instance or client id, a topic, a subtopology or a readiness reason is not interpreted
(``[/bold]`` used to crash both commands for every group, ``[red]x[/red]`` showed as ``x``), emoji
codes stay codes, and control characters are shown escaped instead of reaching the terminal.

Real processes: a coordinator, clients joining with such names, and the CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from regroup.protocol.messages import HeartbeatRequest
from regroup.protocol.shard import EMPTY
from regroup.protocol.streams.topology import Topology
from regroup.rpc.client import CoordinatorClient
from tests.cli.test_cli_commands import _streams_join
from tests.coordinator.server_proc import ServerProc, start_server
from tests.coordinator.test_server import M

BOLD_CLOSE = "[/bold]"  # a closing tag with no opening one: rich raises MarkupError on it
RED = "[red]x[/red]"  # rendered as markup, it shows as "x" and may pose as another group
MEMBER = "[bold]m2"
INSTANCE = "[i]inst"
CLIENT = "[blink]cli"
TOPIC = "[u]t"
EMOJI = ":smile: grp"
ESCAPE = "esc\x1b[31mred"  # an ANSI escape sequence: must not reach the terminal
SUB = "[b]sub"
MISSING = "[red]missing[/red]"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    data = tmp_path_factory.mktemp("markup") / "data"
    s = start_server(data, "--log", f"static:orders=2,{TOPIC}=2")
    try:
        with CoordinatorClient(s.address, timeout_s=10) as c:
            M(BOLD_CLOSE, "m1").join(c)
            M(EMOJI, "m1").join(c)
            M(ESCAPE, "m1").join(c)
            _streams_join(c, "[s]counts", "[m]a", "[p]P1", Topology.of({SUB: ["orders"]}))
            _streams_join(c, "[bad]", "x", "P9", Topology.of({"join": [MISSING]}))
        with CoordinatorClient(s.address, timeout_s=10, client_id=CLIENT) as c:
            r = c.heartbeat(HeartbeatRequest(RED, MEMBER, 0, instance_id=INSTANCE,
                                             rebalance_timeout_ms=30_000, subscribed_topics=("orders", TOPIC),
                                             owned=EMPTY))
            assert r.error.value == "NONE", r.message
        yield s
    finally:
        assert s.terminate() == 0, s.log()


def cli(server: ServerProc, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "regroup.cli", *args, "--coordinator", server.address],
                          capture_output=True, text=True, timeout=120)


def ok(server: ServerProc, *args: str) -> str:
    out = cli(server, *args)
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout, out.stdout  # no escape sequence from a name (and no colours: a pipe)
    return out.stdout


def test_groups_list_prints_every_name_literally(server: ServerProc) -> None:
    out = ok(server, "groups", "list")
    rows = {line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")}
    assert rows == {BOLD_CLOSE, RED, EMOJI, "esc\\x1b[31mred", "[s]counts", "[bad]"}, out
    assert "😄" not in out
    # --json was never affected, and still carries the names as they are.
    listing = json.loads(ok(server, "groups", "list", "--json"))
    assert {g["group"] for g in listing["groups"]} == {BOLD_CLOSE, RED, EMOJI, ESCAPE, "[s]counts", "[bad]"}


def test_groups_describe_prints_every_name_literally(server: ServerProc) -> None:
    out = ok(server, "groups", "describe", BOLD_CLOSE)
    assert out.startswith(f"{BOLD_CLOSE}  state stable  group epoch 1"), out

    out = ok(server, "groups", "describe", RED)
    assert out.startswith(f"{RED}  state stable  group epoch 1"), out
    member = next(line for line in out.splitlines() if MEMBER in line)
    cells = [c.strip() for c in member.split("│")[1:-1]]
    assert cells[:3] == [MEMBER, INSTANCE, f"{CLIENT}@127.0.0.1"], member
    assert f"{TOPIC}[0,1]" in cells[5], member  # its assignment, grouped by topic
    assert f"{TOPIC}:1" in out  # the offsets table's partitions
    assert f"member {MEMBER} joined" in out  # the epoch history's cause

    out = ok(server, "groups", "describe", EMOJI)
    assert out.startswith(f"{EMOJI}  state stable") and "😄" not in out, out
    out = ok(server, "groups", "describe", ESCAPE)
    assert out.startswith("esc\\x1b[31mred  state stable"), out


def test_groups_describe_prints_streams_names_literally(server: ServerProc) -> None:
    out = ok(server, "groups", "describe", "[s]counts")
    assert out.startswith("[s]counts  streams group  state stable"), out
    assert f"topology: {SUB} <- orders" in out
    assert f"{SUB}[0,1]" in out  # the member's active tasks, grouped by subtopology
    assert "[m]a" in out and "[p]P1" in out

    out = ok(server, "groups", "describe", "[bad]")
    assert out.startswith("[bad]  streams group  state not ready"), out
    assert MISSING in out  # the readiness reason names the topic as it is
    assert f"join <- {MISSING}" in out


def test_errors_from_the_coordinator_print_literally(server: ServerProc) -> None:
    out = cli(server, "groups", "describe", "[/bold]nope")
    assert out.returncode == 1
    assert out.stderr.strip() == "error: GROUP_ID_NOT_FOUND: group '[/bold]nope' does not exist", out.stderr
    assert "Traceback" not in out.stderr


def test_an_unreachable_coordinator_is_an_error_line_not_a_traceback(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "regroup.cli", "groups", "list", "--coordinator",
                          "127.0.0.1:1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("error: ListGroups to coordinator 127.0.0.1:1 failed"), out.stderr
