"""The highly-available task assignor: balanced, sticky, and no active moves to a cold copy.

KIP-441's semantics (Kafka Streams' ``HighAvailabilityTaskAssignor``), computed on the coordinator
and meant to be re-run whenever a member reports a warm-up caught up, not on a probing timer.

Words: a process *holds a copy* of a task when it reports a lag for it; the copy is *caught up*
when that lag is at most ``acceptable_recovery_lag``. The *current owner* of a task is the member
that holds it active in the current target. The *intended owner* is where balance wants it.

Rules:

1. Every task has exactly one active member, as soon as the group has a member.
2. Balance. Members are the unit of capacity: with ``q, extra = divmod(tasks, members)`` the first
   ``extra`` members in *capacity order* — by process id, then member id — may hold ``q + 1``
   intended tasks and the others ``q``. These quotas depend on the ids only, never on who holds
   what today: if they followed the current assignment, they would shift while warm-ups are
   pending and so move the target away from the warm-ups. Process id first, because a static
   member restarted in place comes back with a new member id but its process id (its state
   directory's): ordered by member id, its quota could change places with another member's, and
   with every copy caught up a task would move away from its local state at the next computation.
   A process's *quota*, the sum of its members', does not depend on their ids either; which of its
   members holds its extra ones does, so what moves state between processes is decided per process
   (rules 3 and 4). Because each member of a process has its own quota, a process's tasks are
   spread evenly across its members.
3. Stickiness. Each task has at most one *anchor*: the member that holds a warm-up of it (the move
   already under way), else its current owner, else, for a task nobody owns, a member of the
   process with its freshest caught-up copy among those whose quota has room, else of the process
   with its freshest copy (a current standby wins a tie), the member with the most room.
   A process keeps as many of the tasks anchored on its members as its quota allows, preferring
   tasks whose copy on it is caught up, then tasks no other process could take over at once, then
   the smaller lag, then a task within its member's own quota (the member's first ones in this
   order), then the task id. Each member keeps those of them anchored on it up to its own quota;
   the others go to the process's members with room, by member id (moving between members of one
   process moves no state). Per process and by the lags first, because a restarted member's new id
   may change its quota within its process: kept per member, the process then gave up another of
   its tasks, one another process took over at once where before it gave up one nobody could
   (found by Hypothesis's rename property). Member quotas only break ties, so that a member within
   its quota loses nothing when the lags cannot tell its tasks apart. A known gap: two tasks of an
   over-full process that the lags tie but only one of which another process has room for; which
   one it gives up then depends on its members' quotas, so on their ids.
4. The other tasks go, in task order, to members with room: first to a member whose process has a
   caught-up copy (smallest lag, then process id, then member id); then to one whose process holds
   any copy (likewise), else to the first member with room in rule 2's capacity order. Preferences
   are fixed orders, never the load of the moment, which keeps rule 9 true.
5. An active moves only to a caught-up copy. A task goes to its intended owner when that member's
   process is caught up or is its current owner's process (moving between members of one process
   moves no state). Otherwise it stays with its current owner, caught up or not: nothing is gained
   by moving it anywhere else. A task with no current owner goes to its intended owner if that copy
   is caught up or as fresh as any, else to a process with a caught-up copy (none: with the
   freshest copy): every caught-up copy can take over at once, so among them balance decides, as
   in KIP-441. Balance first: a member where the task would not push, on the next run, a task its
   process keeps now out of its quota or onto another member, nor land on another member itself
   (rule 3; else a task would move, against rule 9); then the freshest copy, rule 3's anchor
   winning a tie, then the least intended load. A task nobody
   holds a copy of goes to its intended owner, a member with room.
6. Warm-ups. A task whose intended process is not the process it runs on gets a warm-up on its
   intended member, at most ``max_warmups`` in the group, in this order: warm-ups that continue
   (rule 3), then moves that replace a warm-up, then the rest by task id. A move needs no warm-up
   when the intended process already holds a standby of the task (it is restoring anyway; rule 7
   keeps it there). When a warm-up's copy reports caught up, the next run moves the task (rule 5).
7. Standbys. ``standby_replicas`` per task, on processes other than the active's and the
   warm-up's, one per process: current standbys first (the intended process of a pending move
   first), then caught-up copies, then the smallest lag, then the least loaded process (tasks per
   member), then process id; on a process, its least loaded member. Fewer when processes run out.
8. Input is trusted only as far as it is consistent: tasks the spec does not list and members it
   does not have are ignored; a task held active by several members is anchored on the smallest
   member id; warm-ups beyond ``max_warmups`` (in task order) or on the active's process are not
   anchors.
9. Determinism and stability: the same input gives the same output (every choice is by sorted ids
   or fixed keys), and running again on the output with the same lags gives the output back. When
   every process is caught up on every task, the actives are exactly the balanced target and no
   warm-up is left.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from fractions import Fraction

from regroup.protocol.streams.assignment import (
    NO_TASKS,
    MemberTasks,
    TaskAssignment,
    TaskAssignmentSpec,
)
from regroup.protocol.streams.topology import TaskId

__all__ = ["HighlyAvailableAssignor"]

#: Sorts after every real lag: "no copy here".
_NO_COPY = 1 << 62


class HighlyAvailableAssignor:
    """Lag-aware sticky task assignment with warm-ups (the rules are at the top of the module)."""

    name = "highly-available"

    def assign(self, spec: TaskAssignmentSpec) -> TaskAssignment:
        return _Run(spec).assignment()


class _Run:
    """One assignment: the spec's indexes, then rules 2-7 in order."""

    def __init__(self, spec: TaskAssignmentSpec) -> None:
        self.cfg = spec.config
        # A process without members can run nothing; its copies do not count.
        self.procs = {pid: p for pid, p in spec.processes.items() if p.members}
        self.tasks = sorted(spec.tasks)
        self.process_of = spec.process_of()
        self.members = sorted(self.process_of)
        #: Rule 2's order: stable across a static member's restart (same process, new member id).
        self.capacity_order = sorted(self.members, key=lambda m: (self.process_of[m], m))
        self.members_of = {pid: sorted(p.members) for pid, p in self.procs.items()}
        known = spec.tasks
        self.cur_active: dict[TaskId, str] = {}
        self.cur_standby: dict[TaskId, list[str]] = {}
        warmups: dict[TaskId, str] = {}
        for mid in self.members:
            tasks = self.procs[self.process_of[mid]].members[mid]
            for t in sorted(tasks.active & known):
                self.cur_active.setdefault(t, mid)
            for t in sorted(tasks.standby & known):
                self.cur_standby.setdefault(t, []).append(mid)
            for t in sorted(tasks.warmup & known):
                warmups.setdefault(t, mid)
        valid = [t for t in sorted(warmups) if t not in self.cur_active
                 or self.process_of[self.cur_active[t]] != self.process_of[warmups[t]]]
        self.cur_warmup = {t: warmups[t] for t in valid[:self.cfg.max_warmups]}
        # Caught-up processes per task, freshest first: rules 3-5 ask for them again and again.
        self.caught: dict[TaskId, list[str]] = {}
        lag_limit = self.cfg.acceptable_recovery_lag
        for pid in sorted(self.procs):
            for t, lag in self.procs[pid].lags.items():
                if lag is not None and lag <= lag_limit and t in known:
                    self.caught.setdefault(t, []).append(pid)
        for t, pids in self.caught.items():
            pids.sort(key=self._freshness(t))

    def _freshness(self, task: TaskId) -> Callable[[str], tuple[int, str]]:
        return lambda pid: (self.lag(pid, task), pid)

    def lag(self, pid: str, task: TaskId) -> int:
        lag = self.procs[pid].lags.get(task)
        return _NO_COPY if lag is None else lag

    def is_caught_up(self, pid: str, task: TaskId) -> bool:
        return self.lag(pid, task) <= self.cfg.acceptable_recovery_lag

    def freshest_copy(self, task: TaskId) -> str | None:
        """The process with the smallest lag for ``task`` (a current standby wins a tie)."""
        standby_procs = {self.process_of[m] for m in self.cur_standby.get(task, ())}
        holders = [p for p in self.procs if self.lag(p, task) != _NO_COPY]
        if not holders:
            return None
        return min(holders, key=lambda p: (self.lag(p, task), p not in standby_procs, p))

    # -- the steps ----------------------------------------------------------------------------

    def assignment(self) -> TaskAssignment:
        if not self.members:
            return {}
        self.quota = self._quotas()
        self.anchor = self._anchors()
        self.intended = self._intended()
        actives, pending, warmups = self._actives()
        standbys = self._standbys(actives, warmups, pending)
        roles: dict[str, tuple[set[TaskId], set[TaskId], set[TaskId]]] = {}
        for t, m in actives.items():
            roles.setdefault(m, (set(), set(), set()))[0].add(t)
        for t, ms in standbys.items():
            for m in ms:
                roles.setdefault(m, (set(), set(), set()))[1].add(t)
        for t, m in warmups.items():
            roles.setdefault(m, (set(), set(), set()))[2].add(t)
        out: TaskAssignment = {}
        for m in self.members:
            r = roles.get(m)
            out[m] = NO_TASKS if r is None else MemberTasks(*map(frozenset, r))
        return out

    def _quotas(self) -> dict[str, int]:
        """Rule 2."""
        q, extra = divmod(len(self.tasks), len(self.members))
        return {m: q + (i < extra) for i, m in enumerate(self.capacity_order)}

    def _anchors(self) -> dict[TaskId, str]:
        """Rule 3's anchors (rule 8 has already cleaned the current roles)."""
        anchor = dict(self.cur_warmup)
        for t, m in self.cur_active.items():
            anchor.setdefault(t, m)
        count = Counter(anchor.values())

        def spare(m: str) -> int:
            return self.quota[m] - count[m]

        for t in self.tasks:
            if t in anchor:
                continue
            # A caught-up copy on a process with room, so that no owner is displaced (a process keeps
            # its quota, rule 3); else the freshest copy, which is where rule 5 runs the task anyway.
            roomy = [p for p in self.caught.get(t, ())
                     if sum(spare(m) for m in self.members_of[p]) > 0]
            best = roomy[0] if roomy else self.freshest_copy(t)
            if best is None:
                continue
            m = min(self.members_of[best], key=lambda m: (-spare(m), m))
            anchor[t] = m
            count[m] += 1
        return anchor

    def _keep_rank(self, pid: str, task: TaskId) -> tuple[bool, bool, int, TaskId]:
        """Rule 3's order of what a member keeps (smallest first): fixed by the lags alone."""
        others = any(p != pid for p in self.caught.get(task, ()))
        return (not self.is_caught_up(pid, task), others, self.lag(pid, task), task)

    def _kept(self, pid: str, anchored: dict[TaskId, str]) -> dict[TaskId, str]:
        """Rule 3 on one process: which of the tasks anchored on its members (``anchored``: task ->
        member) it keeps, and on which member. A function of the anchors alone, so that rule 5 can
        ask what the next run will keep."""
        room = {m: self.quota[m] for m in self.members_of[pid]}
        rank = {t: self._keep_rank(pid, t) for t in anchored}
        own: dict[str, list[TaskId]] = {}
        for t in sorted(anchored, key=rank.__getitem__):
            own.setdefault(anchored[t], []).append(t)
        # Only between tasks the lags cannot tell apart: one within its member's own quota first,
        # so that a member within its quota loses nothing (stickiness at the member level too).
        mine = {t for m, ts in own.items() for t in ts[:room[m]]}

        def order(t: TaskId) -> tuple[bool, bool, int, bool, TaskId]:
            not_caught_up, others, lag, _ = rank[t]
            return (not_caught_up, others, lag, t not in mine, t)

        ranked = sorted(anchored, key=order)[:sum(room.values())]
        kept: dict[TaskId, str] = {}
        overflow: list[TaskId] = []
        for t in ranked:
            m = anchored[t]
            if room[m] > 0:
                kept[t] = m
                room[m] -= 1
            else:
                overflow.append(t)
        for t in overflow:  # fits: the process keeps no more than its members' quotas add up to
            m = next(m for m in self.members_of[pid] if room[m] > 0)
            kept[t] = m
            room[m] -= 1
        return kept

    def _intended(self) -> dict[TaskId, str]:
        """Rules 3 and 4: the balanced target."""
        by_process: dict[str, dict[TaskId, str]] = {}
        for t, m in self.anchor.items():
            by_process.setdefault(self.process_of[m], {})[t] = m
        intended: dict[TaskId, str] = {}
        for pid, anchored in by_process.items():
            intended.update(self._kept(pid, anchored))
        room = dict(self.quota)
        for m in intended.values():
            room[m] -= 1
        pool = [t for t in self.tasks if t not in intended]

        def best(task: TaskId, pids: list[str]) -> str | None:
            # Process id before member id: a restarted member's new id must not pick the process.
            fits = [(self.lag(p, task), p, m) for p in pids
                    for m in self.members_of[p] if room[m] > 0]
            return min(fits)[2] if fits else None

        rest: list[TaskId] = []
        for t in pool:  # caught-up copies first: those moves need no warm-up
            fresh = best(t, self.caught.get(t, []))
            if fresh is None:
                rest.append(t)
            else:
                intended[t] = fresh
                room[fresh] -= 1
        open_members = iter(self.capacity_order)
        first_open = next(open_members)
        for t in rest:
            holder = best(t, [p for p in self.procs if self.lag(p, t) != _NO_COPY])
            if holder is None:
                while room[first_open] == 0:
                    first_open = next(open_members)
                holder = first_open
            intended[t] = holder
            room[holder] -= 1
        return intended

    def _actives(self) -> tuple[dict[TaskId, str], list[TaskId], dict[TaskId, str]]:
        """Rule 5; also returns the pending moves (running away from their intended process) and
        their warm-ups (rule 6), which are known before the orphans are placed: the pending moves
        are, and the orphans' placement needs the warm-ups (`_orphan_owner`)."""
        actives: dict[TaskId, str] = {}
        pending: list[TaskId] = []
        orphans: list[tuple[TaskId, str]] = []
        for t in self.tasks:
            m = self.intended[t]
            pid = self.process_of[m]
            owner = self.cur_active.get(t)
            if (owner is not None and self.process_of[owner] == pid) or self.is_caught_up(pid, t):
                actives[t] = m
                continue
            if owner is not None:
                actives[t] = owner
            else:
                fresh = self.freshest_copy(t)
                if fresh is None or self.lag(pid, t) <= self.lag(fresh, t):
                    actives[t] = m
                    continue
                orphans.append((t, fresh))  # placed once every other active is placed
            pending.append(t)
        warmups = self._warmups(pending)
        if orphans:
            # What each member anchors on the next run (rule 3): its warm-ups, and its actives
            # except those warming up elsewhere (a warm-up anchors its task to the warm-up's member).
            held: dict[str, list[TaskId]] = {}
            for t, m in actives.items():
                if warmups.get(t, m) == m:
                    held.setdefault(m, []).append(t)
            for t, m in warmups.items():
                held.setdefault(m, []).append(t)
            intended_load = Counter(self.intended.values())
            for t, fresh in orphans:
                m = self._orphan_owner(t, fresh, held, intended_load)
                actives[t] = m
                if warmups.get(t, m) == m:
                    held.setdefault(m, []).append(t)
        return actives, pending, warmups

    def _orphan_owner(self, task: TaskId, fresh: str, held: dict[str, list[TaskId]],
                      intended_load: Counter[str]) -> str:
        """Rule 5's member for a task nobody owns whose intended owner's copy is too stale.

        Its caught-up copies (else its freshest ones) can all take it over at once. Among them, a
        member it would not push out of its quota on the next run: that run sees the task owned
        there, and a process keeps its quota of anchored tasks (``held``: its members' actives and
        warm-ups) by rule 3's order, each member its own first, so a task that ranks before one the
        process keeps now would displace that one, and one beyond its member's quota would be kept
        on another member; either would then move (rule 9). Counting the warm-ups matters: an
        orphan placed beside a warm-up of lower rank took the warm-up's slot on the next run, and
        the move under way was dropped (found by Hypothesis).
        Then the freshest copy, the anchor's process winning a tie (another process tied with it
        would be picked by process id alone, and the next run would keep a different set per
        member), a current standby, the process id, the least intended load, the member id.
        """
        pids = self.caught.get(task) or [
            p for p in self.procs if self.lag(p, task) == self.lag(fresh, task)]
        standby_procs = {self.process_of[m] for m in self.cur_standby.get(task, ())}
        anchored = self.anchor.get(task)

        def displaces(m: str) -> bool:
            # The next run's rule 3 on m's process, without and with the task on m: a task kept
            # now that it drops or keeps on another member would move; so would the task itself,
            # kept on another member of the process.
            pid = self.process_of[m]
            now = {u: o for o in self.members_of[pid] for u in held.get(o, ())}
            before = self._kept(pid, now)
            after = self._kept(pid, {**now, task: m})
            return after.get(task, m) != m or any(after.get(u) != o for u, o in before.items())

        def key(m: str) -> tuple[bool, int, bool, bool, str, int, str]:
            pid = self.process_of[m]
            return (displaces(m), self.lag(pid, task), m != anchored, pid not in standby_procs,
                    pid, intended_load[m], m)

        return min((m for p in pids for m in self.members_of[p]), key=key)

    def _standby_restoring(self, task: TaskId) -> bool:
        """True when the intended process of ``task`` already holds a standby of it (rule 6)."""
        if self.cfg.standby_replicas == 0:
            return False
        pid = self.process_of[self.intended[task]]
        return any(self.process_of[s] == pid for s in self.cur_standby.get(task, ()))

    def _warmups(self, pending: list[TaskId]) -> dict[TaskId, str]:
        """Rule 6."""

        def order(t: TaskId) -> tuple[int, TaskId]:
            if t not in self.cur_warmup:
                return (2, t)
            # A warm-up continues where its state is: on its process, whichever member keeps it.
            same = self.process_of[self.anchor[t]] == self.process_of[self.intended[t]]
            return (0 if same else 1, t)

        warmups: dict[TaskId, str] = {}
        budget = self.cfg.max_warmups
        for t in sorted(pending, key=order):
            if budget == 0:
                break
            if t not in self.cur_warmup and self._standby_restoring(t):
                continue
            warmups[t] = self.intended[t]
            budget -= 1
        return warmups

    def _standbys(self, actives: dict[TaskId, str], warmups: dict[TaskId, str],
                  pending: list[TaskId]) -> dict[TaskId, list[str]]:
        """Rule 7."""
        wanted = self.cfg.standby_replicas
        if wanted == 0:
            return {}
        load = Counter(actives.values())
        load.update(warmups.values())
        proc_load = Counter(self.process_of[m] for m in load.elements())
        moving_to = {t: self.process_of[self.intended[t]] for t in pending}
        out: dict[TaskId, list[str]] = {}
        for t in self.tasks:
            used = {self.process_of[actives[t]]}
            if t in warmups:
                used.add(self.process_of[warmups[t]])
            target = moving_to.get(t)
            chosen: list[str] = []
            sticky = sorted(self.cur_standby.get(t, ()), key=lambda s: (
                self.process_of[s] != target, self.lag(self.process_of[s], t), s))
            for s in sticky:
                pid = self.process_of[s]
                if len(chosen) < wanted and pid not in used:
                    chosen.append(s)
                    used.add(pid)
            if len(chosen) < wanted:
                others = sorted((p for p in self.procs if p not in used and self.members_of[p]),
                                key=lambda p: (not self.is_caught_up(p, t), self.lag(p, t),
                                               Fraction(proc_load[p], len(self.members_of[p])), p))
                for pid in others[:wanted - len(chosen)]:
                    chosen.append(min(self.members_of[pid], key=lambda m: (load[m], m)))
            for s in chosen:
                load[s] += 1
                proc_load[self.process_of[s]] += 1
            if chosen:
                out[t] = chosen
        return out
