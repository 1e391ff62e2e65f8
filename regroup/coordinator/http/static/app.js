// The regroup dashboard: two views over the coordinator's read-only JSON API, kept live by /api/events.
// A group's view is a consumer group's (partitions × members) or a streams group's (tasks × members,
// each cell the member's role: active, standby, warm-up with its lag).
//
// Rules:
// 1. The coordinator is the truth: a view is drawn from one fetch of its JSON, whole. An event only
//    says "fetch again"; the page never patches what it shows from an event's payload.
// 2. At most one fetch in flight; events that arrive meanwhile collapse into one more fetch after it.
// 3. Polling is only the fallback while the event stream is down, and never faster than every 5 s —
//    except on a streams group's view, which also re-reads every 5 s: its task copies' lags are soft
//    state that moves without any record written, so no event announces them.
// 4. Text reaches the DOM as text, never as HTML: group and member ids are whatever clients sent.
// 5. Nothing is told by colour alone: every state also has its word (and a symbol in the grid).
"use strict";

(() => {
  const FALLBACK_POLL_MS = 5000;
  // Events for many groups would otherwise keep the list view fetching back to back.
  const MIN_REFETCH_MS = 250;
  const TIMELINE_SHOWN = 300;
  // The core's member states, in the words an operator reads on the page.
  const MEMBER_STATE = { stable: "stable", unrevoked: "revoking", unreleased: "waiting" };
  const CELL = {
    owned: { symbol: "●", hint: "owns it" },
    revoking: { symbol: "◐", hint: "told to give it up; has not released it yet" },
    awaiting: { symbol: "○", hint: "assigned; waits for the previous owner to release it" },
  };
  // A streams task's roles; revoking and awaiting as above, naming the role.
  const ROLE = {
    active: { symbol: "●", word: "active", hint: "processes the task" },
    standby: { symbol: "◑", word: "standby", hint: "keeps a copy of the task's state, for a fast fail-over" },
    warmup: { symbol: "◔", word: "warm-up", hint: "restores the task's state before taking the task over" },
  };
  const STEP = {
    joined: "joined", left: "left", fenced: "fenced", revoking: "revoking", released: "released",
    granted: "granted",
  };

  const view = document.getElementById("view");
  const live = document.getElementById("live");
  let route = parseRoute();
  let loading = false;
  let again = false;
  let pollTimer = null;
  let softTimer = null;

  // ------------------------------------------------------------------ DOM helpers
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") el.textContent = String(v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  function num(n) {
    return n === null || n === undefined ? h("span", { class: "muted", title: "not known" }, "—")
      : Number(n).toLocaleString("en-US");
  }

  function clock(ms) {
    const d = new Date(ms);
    const pad = (x, w) => String(x).padStart(w, "0");
    return h("time", { datetime: d.toISOString(), title: d.toISOString() },
      `${pad(d.getHours(), 2)}:${pad(d.getMinutes(), 2)}:${pad(d.getSeconds(), 2)}.${pad(d.getMilliseconds(), 3)}`);
  }

  function badge(kind, word) {
    return h("span", { class: "badge", "data-state": kind }, word);
  }

  // A column header; numbers are right-aligned, their headers with them.
  function col(name, numeric) {
    return h("th", { scope: "col", class: numeric ? "n" : null }, name);
  }

  function table(caption, headers, rows, attrs) {
    return h("div", { class: "scroll", "data-keep-scroll": (attrs && attrs.id) || null },
      h("table", attrs || {},
        h("caption", {}, caption),
        h("thead", {}, h("tr", {}, headers.map((x) => (x instanceof Node ? x : h("th", { scope: "col" }, x))))),
        h("tbody", {}, rows)));
  }

  // ------------------------------------------------------------------ routes
  function parseRoute() {
    const m = /^#\/group\/(.+)$/.exec(location.hash);
    if (!m) return { kind: "groups" };
    try {
      return { kind: "group", id: decodeURIComponent(m[1]) };
    } catch (_e) {
      return { kind: "groups" };
    }
  }

  function groupHref(id) {
    return `#/group/${encodeURIComponent(id)}`;
  }

  // ------------------------------------------------------------------ loading
  async function getJSON(path) {
    const r = await fetch(path, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    let body = null;
    try {
      body = await r.json();
    } catch (_e) {
      body = null;
    }
    return { status: r.status, body };
  }

  async function refresh() {
    if (loading) {
      again = true;
      return;
    }
    loading = true;
    try {
      do {
        again = false;
        const started = Date.now();
        await load(route);
        const wait = Math.max(0, started + MIN_REFETCH_MS - Date.now());
        if (again && wait > 0) await new Promise((done) => setTimeout(done, wait));
      } while (again);
    } finally {
      loading = false;
    }
  }

  async function load(forRoute) {
    let res;
    try {
      res = await getJSON(forRoute.kind === "group" ? `/api/groups/${encodeURIComponent(forRoute.id)}` : "/api/groups");
    } catch (_e) {
      if (forRoute === route) showProblem("The coordinator does not answer; retrying.");
      return;
    }
    if (forRoute !== route) return; // the reader moved on meanwhile
    if (res.status === 401) {
      showProblem("This dashboard needs the coordinator's token: open /?token=TOKEN once in this browser.");
    } else if (res.status !== 200) {
      const msg = res.body && res.body.message ? res.body.message : `HTTP ${res.status}`;
      showProblem(forRoute.kind === "group" ? `No group ${JSON.stringify(forRoute.id)}: ${msg}` : msg);
    } else {
      if (forRoute.kind === "group" && res.body.kind === "streams") startSoftPoll();
      else stopSoftPoll();
      try {
        draw(forRoute.kind === "group" ? groupView(res.body) : groupsView(res.body.groups));
      } catch (e) {
        // Never a view stuck on "Loading…": say so on the page, and in the console for whoever debugs it.
        console.error("regroup dashboard: could not draw the view", e);
        showProblem(`The page could not draw this view (${e}); the JSON is at the API.`);
      }
    }
  }

  // Every event redraws the view whole: whoever was reading older timeline entries, or the far columns
  // of a wide grid, must not be thrown back to the start each time.
  function draw(content) {
    const keepScroll = window.scrollY;
    const focusedId = document.activeElement && document.activeElement.id;
    const scrolled = new Map([...view.querySelectorAll("[data-keep-scroll]")]
      .map((el) => [el.dataset.keepScroll, [el.scrollTop, el.scrollLeft]]));
    view.replaceChildren(...[content].flat());
    for (const el of view.querySelectorAll("[data-keep-scroll]")) {
      const at = scrolled.get(el.dataset.keepScroll);
      if (at) [el.scrollTop, el.scrollLeft] = at;
    }
    window.scrollTo(0, keepScroll);
    if (focusedId) {
      const el = document.getElementById(focusedId);
      if (el) el.focus();
    }
  }

  function showProblem(text) {
    draw([h("p", { class: "problem", role: "alert" }, text), h("p", {}, h("a", { href: "#/" }, "All groups"))]);
  }

  function updated() {
    return h("p", { class: "muted updated" }, "Updated ", clock(Date.now()));
  }

  // ------------------------------------------------------------------ the groups view
  function groupsView(groups) {
    const rows = groups.map((g) => h("tr", { "data-group": g.group, "data-kind": g.kind },
      h("th", { scope: "row" }, h("a", { href: groupHref(g.group) }, g.group)),
      h("td", { "data-col": "kind" }, g.kind),
      h("td", { "data-col": "state" }, badge(g.state, g.state)),
      h("td", { class: "n", "data-col": "epoch" }, num(g.epoch)),
      h("td", { class: "n", "data-col": "members" }, num(g.members)),
      h("td", { class: "n", "data-col": "lag" }, g.kind === "streams"
        ? h("span", { class: "muted", title: "a streams group's lag is per task copy: see its page" },
          "per task")
        : num(g.lag)),
      h("td", { class: "n", "data-col": "rebalances" }, num(g.rebalances_last_hour))));
    return [
      h("h1", {}, "Groups"),
      groups.length === 0
        ? h("p", { class: "muted", id: "no-groups" }, "No groups yet: they appear here when a member joins.")
        : table("Every group this coordinator owns: consumer groups and streams groups", ["Group", "Kind",
          "State", col("Epoch", true), col("Members", true), col("Total lag", true),
          col("Rebalances (last hour)", true)], rows, { id: "groups" }),
      updated(),
    ];
  }

  // ------------------------------------------------------------------ the group view
  // "topic:partition" (or "topic:partition[lo,hi)" for a key range): the partition is the number
  // after the last colon.
  function splitPartition(p) {
    const whole = p.replace(/\[.*$/, "");
    const i = whole.lastIndexOf(":");
    return i < 0 ? [p, -1] : [whole.slice(0, i), Number(whole.slice(i + 1))];
  }

  function byPartition(a, b) {
    const [ta, pa] = splitPartition(a);
    const [tb, pb] = splitPartition(b);
    return ta < tb ? -1 : ta > tb ? 1 : pa - pb;
  }

  // What one member holds of one partition. Key ranges will be further marks of the same cell.
  function marksOf(member, partition) {
    if (member.pending_revocation.includes(partition)) return ["revoking"];
    if (member.assigned.includes(partition)) return ["owned"];
    if (member.awaiting.includes(partition)) return ["awaiting"];
    return [];
  }

  function memberLabel(m) {
    return m.instance_id ? `${m.member_id} (${m.instance_id})` : m.member_id;
  }

  function membersTable(g) {
    const rows = g.members.map((m) => h("tr", { "data-member": m.member_id },
      h("th", { scope: "row", class: "id" }, m.member_id),
      h("td", {}, m.instance_id || h("span", { class: "muted" }, "—")),
      h("td", {}, m.client && m.client.client_id ? m.client.client_id : h("span", { class: "muted" }, "—")),
      h("td", {}, m.client && m.client.host ? m.client.host : h("span", { class: "muted" }, "—")),
      h("td", { class: "n" }, num(m.epoch)),
      h("td", {}, badge(m.state, MEMBER_STATE[m.state] || m.state)),
      h("td", { class: "n" }, num(m.assigned.length + m.pending_revocation.length))));
    return h("section", { "aria-labelledby": "members-h" },
      h("h2", { id: "members-h" }, `Members (${g.members.length})`),
      g.members.length === 0 ? h("p", { class: "muted" }, "No members.")
        : table("Members: who they are and where each stands in the rebalance",
          ["Member", "Instance", "Client", "Host", col("Epoch", true), "State", col("Partitions", true)], rows,
          { id: "members" }));
  }

  function assignmentGrid(g) {
    const offsets = new Map(g.offsets.map((o) => [o.partition, o]));
    const all = new Set(g.offsets.map((o) => o.partition));
    for (const m of g.members) {
      for (const p of [...m.assigned, ...m.pending_revocation, ...m.awaiting]) all.add(p);
    }
    const partitions = [...all].sort(byPartition);
    const head = [col("Partition"),
      ...g.members.map((m) => h("th", { scope: "col", class: "member", title: memberLabel(m) }, memberLabel(m))),
      col("Committed", true), col("End offset", true), col("Lag", true)];
    const rows = partitions.map((p) => {
      const o = offsets.get(p) || {};
      const owners = g.members.map((m) => {
        const marks = marksOf(m, p);
        return h("td", { class: "cell", "data-member": m.member_id, "data-cell": marks.join(" ") || null },
          marks.map((k) => h("span", { class: "mark", title: CELL[k].hint },
            h("span", { "aria-hidden": "true" }, CELL[k].symbol), ` ${k}`)));
      });
      return h("tr", { "data-partition": p },
        h("th", { scope: "row" }, p), owners,
        h("td", { class: "n" }, num(o.committed)), h("td", { class: "n" }, num(o.log_end_offset)),
        h("td", { class: "n" }, num(o.lag)));
    });
    return h("section", { "aria-labelledby": "assignment-h" },
      h("h2", { id: "assignment-h" }, "Assignment"),
      partitions.length === 0 ? h("p", { class: "muted" }, "No partitions assigned or committed yet.")
        : table("Partitions × members, with each partition's offsets", head, rows, { id: "grid" }),
      h("p", { class: "legend" },
        ...Object.entries(CELL).map(([k, c]) => h("span", {}, h("span", { "aria-hidden": "true" }, c.symbol),
          ` ${k}: ${c.hint}. `))));
  }

  function stepText(s) {
    const parts = s.partitions.length ? ` ${s.partitions.join(", ")}` : "";
    let handoff = "";
    if (s.handoff_ms !== null && s.handoff_ms !== undefined) {
      handoff = s.step === "released" ? ` — released ${s.handoff_ms} ms after the request`
        : ` — hand-off ${s.handoff_ms} ms`;
    }
    return `${parts}${handoff}`;
  }

  const TIMELINE_NOTE = "Newest first. Each epoch bump with its cause; each member's steps " +
    "(revoking → released → granted) with how long each hand-off took.";
  const STREAMS_TIMELINE_NOTE = "Newest first. Each epoch bump with its cause (a warm-up catching up is " +
    "one); members joining, leaving and fenced.";

  function timeline(g, note) {
    const items = [
      ...g.history.map((e) => ({ at: e.at_unix_ms, bump: e })),
      ...g.timeline.map((s) => ({ at: s.at_unix_ms, step: s })),
    ];
    // Oldest first as the API gives them, a bump before the steps it caused at the same millisecond.
    items.sort((a, b) => a.at - b.at || (a.bump ? 0 : 1) - (b.bump ? 0 : 1));
    const shown = items.slice(-TIMELINE_SHOWN).reverse();
    const lis = shown.map((it) => {
      if (it.bump) {
        const e = it.bump;
        const what = e.kind === "group" ? `Group epoch ${e.epoch}` : `Target assignment for epoch ${e.epoch}`;
        return h("li", { class: "bump", "data-kind": e.kind, "data-epoch": e.epoch },
          clock(e.at_unix_ms), " ", h("strong", {}, what), e.cause ? `: ${e.cause}` : "");
      }
      const s = it.step;
      return h("li", { class: "step", "data-step": s.step, "data-member": s.member_id },
        clock(s.at_unix_ms), " ", h("span", { class: "who" }, s.member_id), " ",
        badge(s.step, STEP[s.step] || s.step), stepText(s), h("span", { class: "muted" }, ` (epoch ${s.epoch})`));
    });
    return h("section", { "aria-labelledby": "timeline-h", class: "timeline-section" },
      h("h2", { id: "timeline-h" }, "Epoch history and hand-offs"),
      h("p", { class: "muted" }, note || TIMELINE_NOTE),
      lis.length === 0 ? h("p", { class: "muted" }, "Nothing yet.")
        : h("ol", { id: "timeline", class: "timeline", reversed: true, "data-keep-scroll": "timeline" }, lis));
  }

  // Each subscribed topic with how many members subscribe to it.
  function topicsText(topics) {
    const names = Object.keys(topics).sort();
    return names.length === 0 ? "—" : names.map((t) => `${t} (${topics[t]})`).join(", ");
  }

  function groupView(g) {
    if (g.kind === "streams") return streamsGroupView(g);
    const lag = g.offsets.some((o) => o.lag !== null)
      ? g.offsets.reduce((acc, o) => acc + (o.lag || 0), 0) : null;
    const summary = h("dl", { class: "summary" },
      h("div", {}, h("dt", {}, "State"), h("dd", { id: "group-state" }, badge(g.state, g.state))),
      h("div", {}, h("dt", {}, "Epoch"), h("dd", { id: "group-epoch" }, String(g.epoch))),
      h("div", {}, h("dt", {}, "Target epoch"), h("dd", {}, String(g.target_epoch))),
      h("div", {}, h("dt", {}, "Assignor"), h("dd", {}, g.assignor || "—")),
      h("div", {}, h("dt", {}, "Topics"), h("dd", {}, topicsText(g.subscribed_topics))),
      h("div", {}, h("dt", {}, "Total lag"), h("dd", {}, num(lag))));
    return [
      h("p", { class: "crumbs" }, h("a", { href: "#/" }, "Groups"), " / "),
      h("h1", {}, "Group ", h("span", { class: "id", id: "group-id" }, g.group)),
      summary,
      h("div", { class: "columns" },
        h("div", {}, membersTable(g), assignmentGrid(g)),
        timeline(g)),
      updated(),
    ];
  }

  // ------------------------------------------------------------------ the streams group view
  // Tasks are spelled subtopology_partition (Kafka's spelling); the partition follows the last "_".
  function byTask(a, b) {
    const ia = a.lastIndexOf("_");
    const ib = b.lastIndexOf("_");
    const sa = a.slice(0, ia);
    const sb = b.slice(0, ib);
    return sa < sb ? -1 : sa > sb ? 1 : Number(a.slice(ia + 1)) - Number(b.slice(ib + 1));
  }

  const ROLES = ["active", "standby", "warmup"];

  function tasksOf(t) {
    return ROLES.flatMap((r) => t[r]);
  }

  function fmt(n) {
    return Number(n).toLocaleString("en-US");
  }

  // What one member does with one task: [{ key, symbol, text, hint }], its current roles first.
  function rolesOf(m, task) {
    const marks = [];
    const lag = m.lags[task];
    const warm = m.warmups.find((w) => w.task === task);
    for (const r of ROLES) {
      if (!m.assigned[r].includes(task)) continue;
      let text = ROLE[r].word;
      if (r === "warmup" && warm) {
        text += warm.lag === null ? " · no report yet"
          : warm.caught_up ? ` · caught up (lag ${fmt(warm.lag)} ≤ ${fmt(warm.acceptable_lag)})`
            : ` · lag ${fmt(warm.lag)}, takes over at ≤ ${fmt(warm.acceptable_lag)}`;
      } else if (r !== "active" && lag !== undefined) {
        text += ` · lag ${fmt(lag)}`;
      }
      marks.push({ key: r, symbol: ROLE[r].symbol, text, hint: ROLE[r].hint });
    }
    for (const r of ROLES) {
      if (m.pending_revocation[r].includes(task)) {
        marks.push({ key: "revoking", symbol: CELL.revoking.symbol, text: `revoking ${ROLE[r].word}`,
          hint: CELL.revoking.hint });
      }
    }
    for (const r of ROLES) {
      if (m.target[r].includes(task) && !m.assigned[r].includes(task)) {
        marks.push({ key: "awaiting", symbol: CELL.awaiting.symbol, text: `awaiting ${ROLE[r].word}`,
          hint: "in the member's target, not given to it yet: the previous holder lets go first" });
      }
    }
    return marks;
  }

  function streamsMembersTable(g) {
    const count = (m, r) => num(m.assigned[r].length);
    const rows = g.members.map((m) => h("tr", { "data-member": m.member_id },
      h("th", { scope: "row", class: "id" }, m.member_id),
      h("td", {}, m.instance_id || h("span", { class: "muted" }, "—")),
      h("td", { class: "id" }, m.process_id),
      h("td", { class: "n" }, num(m.epoch)),
      h("td", {}, badge(m.state, MEMBER_STATE[m.state] || m.state)),
      h("td", { class: "n" }, count(m, "active")),
      h("td", { class: "n" }, count(m, "standby")),
      h("td", { class: "n" }, count(m, "warmup"))));
    return h("section", { "aria-labelledby": "members-h" },
      h("h2", { id: "members-h" }, `Members (${g.members.length})`),
      g.members.length === 0 ? h("p", { class: "muted" }, "No members.")
        : table("Members: their process and how many tasks they hold in each role",
          ["Member", "Instance", "Process", col("Epoch", true), "State", col("Active", true),
            col("Standby", true), col("Warm-up", true)], rows, { id: "members" }));
  }

  function taskGrid(g) {
    const all = new Set();
    for (const m of g.members) {
      for (const t of [...tasksOf(m.assigned), ...tasksOf(m.pending_revocation), ...tasksOf(m.target),
        ...Object.keys(m.lags)]) all.add(t);
    }
    const tasks = [...all].sort(byTask);
    const label = (m) => `${memberLabel(m)} · ${m.process_id}`;
    const head = [col("Task"),
      ...g.members.map((m) => h("th", { scope: "col", class: "member", title: label(m) }, label(m)))];
    const rows = tasks.map((t) => h("tr", { "data-task": t },
      h("th", { scope: "row" }, t),
      g.members.map((m) => {
        const marks = rolesOf(m, t);
        const keys = marks.map((k) => k.key).join(" ") || null;
        return h("td", { class: "cell", "data-member": m.member_id, "data-cell": keys },
          marks.map((k, i) => h("span", { class: "mark", title: k.hint },
            i > 0 ? h("br") : null, h("span", { "aria-hidden": "true" }, k.symbol), ` ${k.text}`)));
      })));
    return h("section", { "aria-labelledby": "assignment-h" },
      h("h2", { id: "assignment-h" }, "Tasks"),
      tasks.length === 0 ? h("p", { class: "muted" }, "No tasks assigned or reported yet.")
        : table("Tasks × members: each member's role in each task, with its process's copy's lag behind " +
          "the committed offsets", head, rows, { id: "grid" }),
      h("p", { class: "legend" },
        ...ROLES.map((r) => h("span", {}, h("span", { "aria-hidden": "true" }, ROLE[r].symbol),
          ` ${ROLE[r].word}: ${ROLE[r].hint}. `)),
        h("span", {}, h("span", { "aria-hidden": "true" }, CELL.revoking.symbol),
          ` revoking: ${CELL.revoking.hint}. `),
        h("span", {}, h("span", { "aria-hidden": "true" }, CELL.awaiting.symbol),
          " awaiting: in the member's target, not yet given to it. "),
        "Lags are what the processes last reported; they are not kept across a coordinator restart."));
  }

  function topologyText(topology) {
    const subs = Object.keys(topology).sort();
    return subs.length === 0 ? "— (no member sent one yet)"
      : subs.map((s) => `${s} ← ${topology[s].join(", ")}`).join("; ");
  }

  function streamsGroupView(g) {
    const summary = h("dl", { class: "summary" },
      h("div", {}, h("dt", {}, "Kind"), h("dd", {}, "streams group")),
      h("div", {}, h("dt", {}, "State"), h("dd", { id: "group-state" }, badge(g.state, g.state))),
      h("div", {}, h("dt", {}, "Epoch"), h("dd", { id: "group-epoch" }, String(g.epoch))),
      h("div", {}, h("dt", {}, "Target epoch"), h("dd", {}, String(g.target_epoch))),
      h("div", {}, h("dt", {}, "Ready"), h("dd", { id: "group-ready" }, g.ready ? "yes" : "no")),
      h("div", {}, h("dt", {}, "Topology"), h("dd", { id: "group-topology" }, topologyText(g.topology))));
    const notReady = g.ready ? null : h("div", { class: "problem", id: "not-ready" },
      h("strong", {}, "Not ready: nothing is assigned until the topics fit the topology."),
      h("ul", {}, g.not_ready_reasons.map((r) => h("li", {}, r))));
    return [
      h("p", { class: "crumbs" }, h("a", { href: "#/" }, "Groups"), " / "),
      h("h1", {}, "Streams group ", h("span", { class: "id", id: "group-id" }, g.group)),
      summary,
      ...(notReady ? [notReady] : []),
      h("div", { class: "columns" },
        h("div", {}, streamsMembersTable(g), taskGrid(g)),
        timeline({ history: g.history || [], timeline: g.timeline || [] }, STREAMS_TIMELINE_NOTE)),
      updated(),
    ];
  }

  // ------------------------------------------------------------------ live updates
  function setLive(state, text) {
    live.dataset.live = state;
    live.textContent = text;
  }

  function startFallbackPoll() {
    if (pollTimer === null) pollTimer = setInterval(refresh, FALLBACK_POLL_MS);
  }

  function stopFallbackPoll() {
    if (pollTimer !== null) clearInterval(pollTimer);
    pollTimer = null;
  }

  // Rule 3's exception: a streams group's view re-reads its soft lags.
  function startSoftPoll() {
    if (softTimer === null) softTimer = setInterval(refresh, FALLBACK_POLL_MS);
  }

  function stopSoftPoll() {
    if (softTimer !== null) clearInterval(softTimer);
    softTimer = null;
  }

  function connect() {
    if (typeof EventSource === "undefined") {
      setLive("polling", `updates every ${FALLBACK_POLL_MS / 1000} s`);
      startFallbackPoll();
      return;
    }
    const events = new EventSource("/api/events");
    events.addEventListener("open", () => {
      setLive("live", "live");
      stopFallbackPoll();
      refresh(); // whatever changed while the stream was down
    });
    events.addEventListener("error", () => {
      // EventSource reconnects by itself; until then the view still refreshes, slowly.
      setLive("down", "reconnecting…");
      startFallbackPoll();
    });
    events.addEventListener("group", (e) => {
      let data = null;
      try {
        data = JSON.parse(e.data);
      } catch (_e) {
        return;
      }
      if (route.kind === "groups" || (data && data.group === route.id)) refresh();
    });
    events.addEventListener("groups", () => refresh());
  }

  window.addEventListener("hashchange", () => {
    route = parseRoute();
    stopSoftPoll();
    view.replaceChildren(h("p", { class: "muted" }, "Loading…"));
    refresh().then(() => view.focus({ preventScroll: true }));
  });

  refresh();
  connect();
})();
