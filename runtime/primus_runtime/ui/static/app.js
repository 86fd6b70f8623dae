// The job's page: polls the AM's API (relative URLs: the page is also served under proxies' path
// prefixes) and redraws only what changed, so a job with 10,000 executors and 1,000,000 tasks stays usable:
// the status it polls is the summary (counts, no executor rows), each role table is one page of
// `executors?role=`, and an answer that did not change comes back as a 304 without a body (ETag).
"use strict";

const API = "../api/v1/";
const STATUS_EVERY_MS = 2000;
const SLOW_EVERY_MS = 5000;     // partitions, quarantined tasks
const LOG_EVERY_MS = 1000;
const FIRST_EVENTS = 300;       // events the first status call brings; later ones come with `since`
const EVENTS_KEPT = 20000;
const EVENTS_SHOWN = 300;
const EVENTS_PER_CALL = 5000;
const TASKS_PER_PAGE = 50;
const EXECUTORS_PER_PAGE = 50;  // rows of a role table
const ANSWERS_KEPT = 64;        // answers kept with their ETag, to ask "changed since?"
const PARTITIONS_SHOWN = 500;
const QUARANTINE_SHOWN = 100;
const SAMPLES_KEPT = 4000;
const LOG_CHUNK = 65536;
const LOG_KEPT_CHARS = 1 << 20;
const EARLIER_LOGS = 3;         // an executor's earlier incarnations whose stderr its row links to (the last ones)
const EXECUTOR_STATES = ["new", "starting", "registered", "running", "succeeded", "failed", "lost", "stopped"];
const TERMINAL = new Set(["succeeded", "failed", "lost", "stopped"]);
const JOB_OUTCOMES = new Set(["succeeded", "failed", "killed"]);

const $ = (id) => document.getElementById(id);
const ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"};
const esc = (value) => String(value ?? "").replace(/[&<>"']/g, (c) => ESCAPES[c]);
const enc = encodeURIComponent;

const page = {
  live: false,
  stopped: false,
  job: null,
  roles: new Map(),        // role name -> {block, tbody, rows: Map(executor id -> tr), offset, state, total}
  executors: new Map(),    // executor id -> ExecutorView (latest, of the rows shown)
  holders: new Map(),      // executor incarnation -> id, of every row seen (the Kafka panel names holders)
  answers: new Map(),      // URL -> {etag, data}: the last answer to each GET, the newest last
  changeSeen: new Map(),   // executor id -> {key, at}: when the page saw its state change
  eventsSeen: 0,
  events: [],
  eventsDirty: true,
  samples: [],
  hasData: false,
  quarantinedCount: 0,
  tasks: {offset: 0, total: 0, rows: new Map()},
  kafkaRows: new Map(),    // "topic/partition" -> tr
  log: null,
  logGeneration: 0,
};

// --- calls -------------------------------------------------------------------------------------------

class SignedOut extends Error {}

// A GET sends the ETag of the answer it got last time: a 304 (no body) means that answer still holds,
// and it is returned again (drawing from it rewrites nothing: every draw writes only what differs).
async function call(path, body, base = API) {
  const url = base + path;
  const init = {credentials: "same-origin", cache: "no-store"};
  const known = body === undefined ? page.answers.get(url) : undefined;
  if (body !== undefined) {
    init.method = "POST";
    init.headers = {"Content-Type": "application/json", "X-Primus-Action": "1"};
    init.body = JSON.stringify(body);
  } else if (known) {
    init.headers = {"If-None-Match": known.etag};
  }
  const reply = await fetch(url, init);
  if (reply.status === 401) {
    signedOut();
    throw new SignedOut("signed out");
  }
  if (reply.status === 304 && known) return keepAnswer(url, known.etag, known.data);
  const text = await reply.text();
  let data = null;
  try { data = JSON.parse(text); } catch { /* not JSON: the error below quotes the text */ }
  if (!reply.ok) {
    const error = new Error((data && data.error) || `${reply.status} ${reply.statusText} ${text.slice(0, 200)}`);
    error.status = reply.status;
    throw error;
  }
  const etag = reply.headers.get("ETag");
  return body === undefined && etag ? keepAnswer(url, etag, data) : data;
}

// The newest answers only: URLs carry offsets and filters, so there would be no end to them.
function keepAnswer(url, etag, data) {
  page.answers.delete(url);
  page.answers.set(url, {etag, data});
  if (page.answers.size > ANSWERS_KEPT) page.answers.delete(page.answers.keys().next().value);
  return data;
}

function signedOut() {
  page.stopped = true;
  $("expired").hidden = false;
  document.body.classList.add("expired");
}

// Runs `task` now and then `ms` after each run ends (never two at once); skips while the tab is hidden.
function every(ms, task) {
  const tick = async () => {
    if (page.stopped) return;
    if (!document.hidden) {
      try {
        await task();
        $("fetch-error").hidden = true;
      } catch (error) {
        if (!(error instanceof SignedOut)) showFetchError(error);
      }
    }
    if (!page.stopped) setTimeout(tick, ms);
  };
  return tick();
}

function showFetchError(error) {
  const box = $("fetch-error");
  // A live page loses its AM when the job ends (the AM exits a moment after): say where the rest is.
  const after = page.live && page.job ? ` If the job ended, \`primus ui ${page.job.app_id}\` shows its page as ` +
    "it ended." : "";
  box.textContent = `Could not reach the job: ${error.message}.${after}`;
  box.hidden = false;
}

// --- formatting --------------------------------------------------------------------------------------

function counted(n, noun) { return `${fmtNum(n)} ${noun}${n === 1 ? "" : "s"}`; }  // "1 failure", "2 failures"

function fmtNum(n) { return n == null ? "" : Number(n).toLocaleString("en-US"); }

function fmtBytes(n) {
  if (n == null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

function fmtDuration(seconds) {
  if (seconds == null || !isFinite(seconds)) return "";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor(s % 3600 / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor(s % 86400 / 3600)}h`;
}

// Coarser as it grows, so a row's age cell changes rarely once it is old.
function fmtAge(seconds) {
  const s = Math.max(0, seconds);
  return s < 60 ? `${Math.floor(s)}s` : s < 3600 ? `${Math.floor(s / 60)}m` : fmtDuration(s);
}

function fmtTime(epoch) {
  if (!epoch) return "";
  const when = new Date(epoch * 1000);
  const today = new Date().toDateString() === when.toDateString();
  return today ? when.toLocaleTimeString("en-GB") : when.toLocaleString("en-GB");
}

function fmtPercent(fraction) { return fraction == null ? "" : `${(100 * fraction).toFixed(1)}%`; }

// innerHTML only when it differs from what this element last got from us.
function setHTML(el, html) {
  if (el._html !== html) {
    el._html = html;
    el.innerHTML = html;
  }
}

function setText(el, text) {
  text = String(text ?? "");
  if (el.textContent !== text) el.textContent = text;
}

function facts(pairs) {
  return pairs.filter(([, v]) => v !== "" && v != null).map(([k, v]) => `<dt>${esc(k)}</dt><dd>${v}</dd>`).join("");
}

function stateBadge(state) { return `<span class="state st-${esc(state)}">${esc(state)}</span>`; }

// --- status: job, roles, executors, data -------------------------------------------------------------

async function refreshStatus(first = false) {
  // The task page travels with the status once the page knows the job has input (the first status says
  // so): a job without input is never asked for tasks it does not have.
  let tasks = page.hasData ? refreshTasks() : null;
  const status = await call(`status?view=summary&events=${first ? FIRST_EVENTS : 0}`);
  if (first) takeEvents(status.events);
  renderJob(status.job);
  renderGoodput(status.goodput);
  await renderRoles(status.roles);
  if (status.data) renderData(status.data);
  if (tasks === null && page.hasData) tasks = refreshTasks();
  if (tasks !== null) await tasks;
  if (page.hasData && page.tasks.rows.size) markOnce("primus:tasks-shown");  // its section is visible now
  document.body.classList.remove("loading");
  if (page.live && JOB_OUTCOMES.has(status.job.state)) await endLive(status.job);
}

// The job ended: its AM serves until this page has read the outcome (am/main.py), then exits. One last
// read of the events and charts, then the page stops polling and says that what it shows is final.
async function endLive(job) {
  page.stopped = true;
  await Promise.allSettled([refreshEvents(), refreshTimeline()]);
  document.body.classList.add("readonly", "ended");
  $("fetch-error").hidden = true;
  setText($("ended"), `The job ended: ${job.state}. This page shows its final state; the job's AM has exited ` +
    `(\`primus ui ${job.app_id}\` shows this page again).`);
  $("ended").hidden = false;
}

function renderJob(job) {
  page.job = job;
  document.title = `${job.name} (${job.state}) - Primus`;
  setText($("job-name"), job.name);
  setText($("app-id"), job.app_id);
  const badge = $("job-state");
  setText(badge, job.stopping ? `stopping (${job.stopping})` : job.state);  // the outcome, while executors stop
  badge.className = `state st-${job.state}`;
  setText($("job-reason"), job.reason);
  const end = job.finished_at || Date.now() / 1000;
  const tags = Object.entries(job.tags || {}).map(([k, v]) => `${esc(k)}=${esc(v)}`).join(", ");
  setHTML($("job-facts"), facts([
    ["attempt", esc(job.attempt)],
    ["created", esc(fmtTime(job.created_at))],
    ["started", esc(fmtTime(job.started_at))],
    ["finished", esc(fmtTime(job.finished_at))],
    ["running for", job.started_at ? esc(fmtDuration(end - job.started_at)) : ""],
    ["cluster version", esc(job.cluster_version)],
    ["tags", tags],
  ]));
  document.body.classList.toggle("finished", !!job.finished_at);
}

// Goodput: the effective training time ratio and where the executors' time went (executor-seconds by
// cause, as the AM accounts them). Absent from an AM that does not account it: the line stays hidden.
function renderGoodput(goodput) {
  $("goodput").hidden = !goodput;
  if (!goodput) return;
  setText($("goodput-ratio"), goodput.ratio == null ? "n/a" : goodput.ratio.toFixed(3));
  setHTML($("goodput-causes"), Object.entries(goodput.seconds).map(([cause, seconds]) =>
    `<span class="cause" data-cause="${esc(cause)}">${esc(cause.replace(/_/g, " "))} ${esc(seconds < 10 ? seconds.toFixed(1) : fmtNum(Math.round(seconds)))} s</span>`)
    .join(""));
}

const ROLE_COLUMNS = ["index", "incarnation", "host", "ports", "state", "ready", "restarts", "exit", "heartbeat / change",
  "logs", ""];

// A role's block: its counts, a state filter and a pager over its executors (one page of rows at a time:
// a role of 10,000 executors is 50 rows in the page), and the table.
function roleBlock(role) {
  let entry = page.roles.get(role);
  if (entry) return entry;
  const block = document.createElement("div");
  block.className = "role";
  block.dataset.role = role;
  const states = EXECUTOR_STATES.map((s) => `<option>${s}</option>`).join("");
  block.innerHTML = `<h3>${esc(role)} <span class="role-summary"></span>
    <button type="button" class="action" data-act="scale" data-role="${esc(role)}">Scale</button></h3>
    <div class="filters pager"><select class="executor-state" aria-label="${esc(role)} executor state">
    <option value="">all states</option><option value="not-running">not running</option>${states}</select>
    <button type="button" data-act="executors-page" data-role="${esc(role)}" data-step="-1">&larr; previous</button>
    <span class="executor-range"></span>
    <button type="button" data-act="executors-page" data-role="${esc(role)}" data-step="1">next &rarr;</button></div>
    <div class="scroll"><table class="grid executors"><thead><tr>${ROLE_COLUMNS.map((c) => `<th>${esc(c)}</th>`).join("")}</tr></thead>
    <tbody></tbody></table></div>`;
  $("role-tables").appendChild(block);
  entry = {block, summary: block.querySelector(".role-summary"), tbody: block.querySelector("tbody"), rows: new Map(),
    name: role, offset: 0, total: 0, stateSelect: block.querySelector(".executor-state"),
    range: block.querySelector(".executor-range"), prev: block.querySelector("[data-step='-1']"),
    next: block.querySelector("[data-step='1']")};
  entry.stateSelect.addEventListener("change", () => {
    entry.offset = 0;
    refreshRoleTable(entry).catch(showFetchError);
  });
  page.roles.set(role, entry);
  return entry;
}

// A role sized on the input's backlog (Role.autoscale): its bounds and the last change it made.
function autoscaleText(policy) {
  if (!policy) return "";
  const last = policy.last_decision;
  return ` · autoscale ${policy.min_replicas}..${policy.max_replicas}` + (last ? ` (last: ${last.reason})` : "");
}

// The roles' counts come with the status; each table's page of executors is asked for at once, all roles
// together.
async function renderRoles(roles) {
  for (const role of roles) {
    const entry = roleBlock(role.name);
    const states = Object.entries(role.states).filter(([, n]) => n).map(([s, n]) => `${fmtNum(n)} ${s}`).join(", ");
    const flags = [role.released ? "" : "not released", role.ignored ? "ignored" : ""].filter(Boolean).join(", ");
    setText(entry.summary, `${fmtNum(role.replicas)} wanted · ${states || "none yet"} · ${fmtNum(role.ready)} ready · ` +
      `${counted(role.restarts, "restart")} · ${counted(role.failures, "failure")}${flags ? " · " + flags : ""}${autoscaleText(role.autoscale)}`);
    entry.block.querySelector("[data-act=scale]").dataset.replicas = role.replicas;
  }
  await Promise.all(roles.map((role) => refreshRoleTable(page.roles.get(role.name))));
  markOnce("primus:executors-shown");
}

function roleQuery(entry) {
  const params = new URLSearchParams({role: entry.name, offset: entry.offset, limit: EXECUTORS_PER_PAGE});
  const state = entry.stateSelect.value;
  if (state) params.set("state", state === "not-running" ? EXECUTOR_STATES.filter((s) => s !== "running").join(",") : state);
  return params.toString();
}

// One page of a role's executors, as its filter and pager say.
async function refreshRoleTable(entry) {
  const query = roleQuery(entry);
  const reply = await call(`executors?${query}`);
  if (query !== roleQuery(entry)) return;  // the filter or the page changed while this one was on its way
  entry.total = reply.total;
  if (reply.total && entry.offset >= reply.total) {  // executors went away (a scale-down): the last page
    entry.offset = Math.floor((reply.total - 1) / EXECUTORS_PER_PAGE) * EXECUTORS_PER_PAGE;
    return refreshRoleTable(entry);
  }
  for (const ex of reply.executors) {
    page.executors.set(ex.id, ex);
    page.holders.set(ex.incarnation, ex.id);
  }
  renderExecutorRows(entry, reply.executors, Date.now() / 1000);
  const first = reply.total ? reply.offset + 1 : 0;
  setText(entry.range, ` ${fmtNum(first)}-${fmtNum(reply.offset + reply.executors.length)} of ${fmtNum(reply.total)} `);
  entry.prev.disabled = reply.offset === 0;
  entry.next.disabled = reply.offset + reply.executors.length >= reply.total;
}

// Performance marks of the first load (bench/ui_load.py reads them): when the page first showed its
// executors and a page of its task table, by the browser's own clock.
function markOnce(name) {
  if (!performance.getEntriesByName(name).length) performance.mark(name);
}

function renderExecutorRows(entry, list, now) {
  list.sort((a, b) => a.index - b.index);
  const wanted = new Set(list.map((ex) => ex.id));
  // New rows are parsed as one piece of HTML (a first load of 1,000 executors is one parse, not 11,000);
  // known rows get only their changed cells rewritten.
  const fresh = list.filter((ex) => !entry.rows.has(ex.id));
  if (fresh.length) {
    const cells = fresh.map((ex) => executorCells(ex, now));
    const template = document.createElement("template");
    template.innerHTML = fresh.map((ex, i) => `<tr class="st-${esc(ex.state)}" data-ex="${esc(ex.id)}">` +
      cells[i].map((cell) => `<td>${cell}</td>`).join("") + "</tr>").join("");
    fresh.forEach((ex, i) => {
      const tr = template.content.children[i];
      tr._cells = cells[i];
      entry.rows.set(ex.id, tr);
    });
  }
  for (const ex of fresh.length ? list.filter((ex) => !fresh.includes(ex)) : list) {
    const tr = entry.rows.get(ex.id);
    updateCells(tr, executorCells(ex, now));
    const rowClass = `st-${ex.state}`;
    if (tr.className !== rowClass) tr.className = rowClass;
  }
  for (const [id, tr] of entry.rows) {
    if (!wanted.has(id)) {
      tr.remove();
      entry.rows.delete(id);
      page.changeSeen.delete(id);
    }
  }
  // Re-append only when the order differs (a new executor, an index in between).
  let child = entry.tbody.firstElementChild;
  let inOrder = true;
  for (const ex of list) {
    if (child !== entry.rows.get(ex.id)) { inOrder = false; break; }
    child = child.nextElementSibling;
  }
  if (!inOrder || child) {
    const fragment = document.createDocumentFragment();
    for (const ex of list) fragment.appendChild(entry.rows.get(ex.id));
    entry.tbody.appendChild(fragment);
  }
}

// A live executor's age is since its last heartbeat (an ended one shows when it ended); before its first
// report, since its last change of state, from the AM's timestamps, or since this page saw the change
// (whichever is later).
function lastChange(ex, now) {
  if (ex.heartbeat_at && !TERMINAL.has(ex.state)) return Math.max(0, now - ex.heartbeat_at);
  const key = `${ex.incarnation}/${ex.state}/${ex.ready}`;
  const seen = page.changeSeen.get(ex.id);
  const stamped = Math.max(ex.created_at || 0, ex.registered_at || 0, ex.running_at || 0, ex.ready_at || 0,
    ex.finished_at || 0);
  if (!seen) {
    page.changeSeen.set(ex.id, {key, at: Math.min(stamped, now)});
  } else if (seen.key !== key) {
    page.changeSeen.set(ex.id, {key, at: Math.min(Math.max(stamped, seen.at), now)});
  }
  return now - page.changeSeen.get(ex.id).at;
}

function executorCells(ex, now) {
  const exit = ex.exit_code == null ? esc(ex.reason) : `<b>${esc(ex.exit_code)}</b> ${esc(ex.reason)}`;
  const logs = Object.keys(ex.logs || {}).map((stream) =>
    `<a href="#" data-act="log" data-ex="${esc(ex.id)}" data-stream="${esc(stream)}">${esc(stream)}</a>`).join(" ") +
    earlierLogs(ex);
  const restart = TERMINAL.has(ex.state) ? "" :
    `<button type="button" class="action small" data-act="restart" data-ex="${esc(ex.id)}">restart</button>`;
  return [
    esc(ex.index),
    `<span title="attempt ${esc(ex.attempt)}">${esc(ex.incarnation)}</span>`,
    esc(ex.host || ""),
    esc((ex.ports || []).join(",")),
    `${esc(ex.state)}${ex.stop_reason && !TERMINAL.has(ex.state) ?  // asked to stop, not stopped yet
      ` <span class="muted" title="${esc(ex.stop_reason)}">(stopping)</span>` : ""}`,
    ex.ready ? "yes" : "",
    esc(ex.restarts ?? ""),
    exit,
    TERMINAL.has(ex.state) && ex.finished_at ? `ended ${esc(fmtTime(ex.finished_at))}` : esc(fmtAge(lastChange(ex, now))),
    logs,
    restart,
  ];
}

// The stderr of the incarnations a restart replaced (the last few: an executor may restart often), where
// the cause of a failover usually is.
function earlierLogs(ex) {
  const attempts = [];
  for (let attempt = Math.max(0, (ex.attempt || 0) - EARLIER_LOGS); attempt < (ex.attempt || 0); attempt++) {
    attempts.push(`<a href="#" data-act="log" data-ex="${esc(ex.id)}" data-stream="stderr" data-attempt="${attempt}" ` +
      `title="stderr of attempt ${attempt}, replaced by a restart">#${attempt}</a>`);
  }
  return attempts.length ? ` <span class="muted">earlier stderr:</span> ${attempts.join(" ")}` : "";
}

function updateCells(tr, cells) {
  const previous = tr._cells || [];
  for (let i = 0; i < cells.length; i++) {
    if (previous[i] !== cells[i]) tr.children[i].innerHTML = cells[i];
  }
  tr._cells = cells;
}

function renderData(data) {
  if (!page.hasData) {
    page.hasData = true;
    $("data").hidden = false;
    every(SLOW_EVERY_MS, refreshPartitions);
  }
  const badge = $("data-state");
  setText(badge, data.state);
  badge.className = `state st-${data.state}`;
  $("data-suspend").hidden = !["running", "scanning", "exhausted"].includes(data.state);
  $("data-resume").hidden = data.state !== "suspended";
  const t = data.tasks;
  const byState = ["queued", "running", "done", "failed", "quarantined"]
    .map((s) => `<a href="#task-table" data-act="task-state" data-state="${s}">${fmtNum(t[s] || 0)} ${s}</a>`)
    .join(" · ");
  const bytesDone = data.bytes.done;
  const fraction = data.progress ?? data.progress_of_discovered;
  $("progress-bar").style.width = fmtPercent(fraction || 0);
  setHTML($("data-facts"), facts([
    ["tasks", `${fmtNum(t.total)} discovered: ${byState}`],
    ["bytes", `${esc(fmtBytes(bytesDone))} of ${esc(fmtBytes(data.bytes.total))} discovered ` +
      `(${esc(fmtPercent(data.progress_of_discovered))})`],
    ["of the whole input", data.progress == null ? "not known yet (partitions still awaited)" : esc(fmtPercent(data.progress))],
    ["records done", esc(fmtNum(data.records_done))],
    ["rate", `${esc(fmtBytes(data.rate_bytes_per_s))}/s`],
    ["ETA", esc(fmtDuration(data.eta_seconds))],
    ["partitions listed", esc(fmtNum(data.partitions_listed))],
    ["scan", data.scan_complete ? "complete" : "still listing"],
    ["waiting for", esc(data.waiting_for || "")],
  ]));
  const failure = $("data-failure");
  failure.hidden = !data.failure;
  setText(failure, data.failure || "");
  setText($("quarantine-count"), fmtNum(data.quarantined.length));
  page.quarantinedCount = data.quarantined.length;
  if (data.kafka) renderKafka(data.kafka);
}

// The Kafka source (data.kafka): one line of lag, rate, watermark, ETA and the brokers' state, and a
// row per partition (rows stay; only the cells that changed are rewritten).
function renderKafka(kafka) {
  $("kafka").hidden = false;
  setText($("kafka-source"), `${kafka.source} · ${kafka.topics.join(", ")} · group ${kafka.group}`);
  const lag = kafka.lag == null ? "not known yet" : `${fmtNum(kafka.lag)} records`;
  const eta = kafka.eta_seconds == null ? "" : ` · caught up in ${esc(fmtDuration(kafka.eta_seconds))}`;
  const brokers = kafka.reachable ? "brokers reachable" :
    `<span class="bad">brokers unreachable since ${esc(kafka.unreachable_since)}</span>`;
  const progress = kafka.progress == null ? "" : ` · ${esc(fmtPercent(kafka.progress))} of the range`;
  setHTML($("kafka-line"), `lag ${esc(lag)} · ${esc(fmtNum(kafka.records_per_s))} records/s · ` +
    `watermark ${esc(kafka.watermark || "none yet")}${eta}${progress} · ${brokers}`);
  const holders = page.holders;  // a holder never shown in a role table is named by its incarnation
  const tbody = $("kafka-partitions");
  const seen = new Set();
  kafka.partitions.forEach((p, i) => {
    const key = `${p.topic}/${p.partition}`;
    seen.add(key);
    const cells = [esc(p.topic), esc(p.partition), esc(p.holder ? holders.get(p.holder) || p.holder : ""),
      esc(fmtNum(p.offset)), esc(fmtNum(p.high)), esc(p.lag == null ? "?" : fmtNum(p.lag)), esc(p.time || "")];
    let tr = page.kafkaRows.get(key);
    if (!tr) {
      tr = document.createElement("tr");
      tr.dataset.partition = key;
      tr.innerHTML = "<td></td>".repeat(cells.length);
      page.kafkaRows.set(key, tr);
    }
    if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null);  // new partitions
    updateCells(tr, cells);
  });
  for (const [key, tr] of page.kafkaRows) {
    if (!seen.has(key)) {
      tr.remove();
      page.kafkaRows.delete(key);
    }
  }
}

async function refreshPartitions() {
  const reply = await call("data/partitions");
  const watermarks = [["all sources", esc(reply.watermark || "none yet")]]
    .concat(reply.sources.map((s) => [s.name, esc(s.watermark || "none yet")]));
  if (reply.waiting_for) watermarks.push(["waiting for", esc(reply.waiting_for)]);
  setHTML($("watermarks"), facts(watermarks));
  setText($("partition-count"), fmtNum(reply.partitions.length));
  if ($("partitions-box").open) {
    setHTML($("partitions"), reply.partitions.slice(0, PARTITIONS_SHOWN).map((p) =>
      `<tr><td>${esc(p.source)}</td><td>${esc(p.partition || "(none)")}</td><td>${fmtNum(p.tasks)}</td>` +
      `<td>${fmtNum(p.done)}</td><td>${fmtNum(p.running)}</td><td>${fmtNum(p.quarantined)}</td>` +
      `<td>${esc(fmtBytes(p.bytes_done))} / ${esc(fmtBytes(p.bytes))}</td></tr>`).join(""));
    setText($("partitions-more"), reply.partitions.length > PARTITIONS_SHOWN ?
      `The first ${PARTITIONS_SHOWN} of ${fmtNum(reply.partitions.length)} partitions.` : "");
  }
  await refreshQuarantined();
}

async function refreshQuarantined() {
  if (!page.quarantinedCount) {
    setHTML($("quarantined"), "");
    return;
  }
  const reply = await call(`data/tasks?state=quarantined&limit=${QUARANTINE_SHOWN}`);
  setHTML($("quarantined"), reply.tasks.map((task) =>
    `<tr><td>${esc(task.id)}</td><td>${fmtNum(task.attempts)}</td><td class="wrap">${esc(task.error)}</td>` +
    `<td>${taskActions(task)}</td></tr>`).join(""));
}

// --- the task table: one page at a time, filtered by the server ----------------------------------------

function taskQuery() {
  const params = new URLSearchParams({offset: page.tasks.offset, limit: TASKS_PER_PAGE});
  const state = $("task-state").value;
  const q = $("task-q").value.trim();
  if (state) params.set("state", state);
  if (q) params.set("q", q);
  return params.toString();
}

async function refreshTasks() {
  const query = taskQuery();
  const reply = await call(`data/tasks?${query}`);
  if (query !== taskQuery()) return;  // the filter changed while this page was on its way
  page.tasks.total = reply.total;
  if (reply.total && page.tasks.offset >= reply.total) {
    page.tasks.offset = Math.floor((reply.total - 1) / TASKS_PER_PAGE) * TASKS_PER_PAGE;
    return refreshTasks();
  }
  page.tasks.rows = new Map(reply.tasks.map((t) => [t.id, t]));
  setHTML($("tasks"), reply.tasks.map(taskRow).join("") ||
    `<tr><td colspan="7" class="muted">No task matches.</td></tr>`);
  const first = reply.total ? reply.offset + 1 : 0;
  setText($("task-range"), ` ${fmtNum(first)}-${fmtNum(reply.offset + reply.tasks.length)} of ${fmtNum(reply.total)} `);
  $("task-prev").disabled = reply.offset === 0;
  $("task-next").disabled = reply.offset + reply.tasks.length >= reply.total;
}

function taskRow(task) {
  const position = `${fmtNum(task.records)} records, ${fmtBytes(task.bytes_done)} of ${fmtBytes(task.size)}`;
  const attempts = task.interruptions ? `${task.attempts} (+${task.interruptions} interrupted)` : task.attempts;
  return `<tr class="st-${esc(task.state)}" data-task="${esc(task.id)}"><td title="${esc(task.url)}">${esc(task.id)}</td>` +
    `<td>${esc(task.start)}-${esc(task.end)}</td><td>${esc(task.state)}</td><td>${esc(attempts)}</td>` +
    `<td>${esc(task.holder || "")}</td><td>${esc(position)}</td><td>${taskActions(task)}</td></tr>`;
}

function taskActions(task) {
  const holder = task.state === "running" ? esc(task.holder || "") : "";
  const requeue = ["quarantined", "failed", "done"].includes(task.state) ?
    `<button type="button" class="action small" data-act="requeue" data-task="${esc(task.id)}">re-queue</button>` : "";
  const skip = ["queued", "running", "failed"].includes(task.state) ?
    `<button type="button" class="action small" data-act="skip" data-task="${esc(task.id)}" data-holder="${holder}">skip</button>` : "";
  return requeue + skip;
}

// --- events: fetched once, then only the new ones; filtered here ----------------------------------------

function eventKind(subject) {
  if (subject === "job" || subject === "data") return subject;
  if (subject.startsWith("task/")) return "task";
  if (subject.startsWith("role/")) return "role";
  return "executor";
}

function takeEvents(events) {
  if (!events.length) return;
  page.events.push(...events);
  if (page.events.length > EVENTS_KEPT) page.events.splice(0, page.events.length - EVENTS_KEPT);
  page.eventsSeen = events[events.length - 1].seq;
  page.eventsDirty = true;
}

async function refreshEvents() {
  for (;;) {
    const reply = await call(`events?since=${page.eventsSeen}&limit=${EVENTS_PER_CALL}`);
    takeEvents(reply.events);
    if (reply.events.length < EVENTS_PER_CALL) break;
  }
  renderEvents();
}

function renderEvents() {
  if (!page.eventsDirty) return;
  page.eventsDirty = false;
  const kinds = new Set([...document.querySelectorAll("#event-filter input[type=checkbox]:checked")].map((c) => c.value));
  const q = $("event-q").value.trim().toLowerCase();
  const shown = [];
  let matching = 0;
  for (let i = page.events.length - 1; i >= 0; i--) {
    const e = page.events[i];
    if (!kinds.has(eventKind(e.subject))) continue;
    if (q && !`${e.subject} ${e.from_state || ""} ${e.to_state} ${e.reason} ${e.actor || ""}`.toLowerCase().includes(q)) continue;
    matching++;
    if (shown.length < EVENTS_SHOWN) shown.push(e);
  }
  setHTML($("event-list"), shown.map((e) =>
    `<tr class="ev-${esc(eventKind(e.subject))}"><td>${esc(e.seq)}</td><td>${esc(fmtTime(e.time))}</td>` +
    `<td>${esc(e.subject)}</td><td>${esc(e.from_state || "")} &rarr; ${stateBadge(e.to_state)}` +
    `${e.exit_code == null ? "" : ` (exit ${esc(e.exit_code)})`}</td><td class="wrap">${esc(e.reason)}</td>` +
    `<td>${esc(e.actor || "")}</td></tr>`).join(""));
  setText($("event-count"), `${fmtNum(matching)} matching of ${fmtNum(page.events.length)}` +
    (matching > EVENTS_SHOWN ? `, the latest ${EVENTS_SHOWN} shown` : ""));
}

// --- charts: inline SVG drawn from the timeline samples ---------------------------------------------

const COMPACT = new Intl.NumberFormat("en-US", {notation: "compact", maximumFractionDigits: 1});
const PALETTE = {new: "#9ca3af", starting: "#f59e0b", registered: "#a855f7", running: "#2563eb",
  succeeded: "#16a34a", failed: "#dc2626", lost: "#7f1d1d", stopped: "#6b7280"};

// A live AM ends its timeline with a sample of this moment: the page replaces it at the next refresh
// instead of keeping it, so that the kept samples stay evenly spaced.
async function refreshTimeline() {
  if (page.live && page.samples.length) page.samples.pop();
  const since = page.samples.length ? page.samples[page.samples.length - 1].time : 0;
  const reply = await call(`timeline?since=${since}`);
  if (!reply.samples.length) return;
  page.samples.push(...reply.samples.filter((s) => s.time > since));
  if (page.samples.length > SAMPLES_KEPT) page.samples = page.samples.filter((_, i) => i % 2 === 0);
  drawCharts();
}

function drawCharts() {
  const s = page.samples;
  const times = s.map((x) => x.time);
  const rate = s.map((x, i) => i === 0 ? 0 :
    Math.max(0, (x.records_done - s[i - 1].records_done) / Math.max(1e-3, x.time - s[i - 1].time)));
  const executors = EXECUTOR_STATES.filter((state) => s.some((x) => x.executors[state]))
    .map((state) => ({name: state, color: PALETTE[state], values: s.map((x) => x.executors[state] || 0)}));
  const dataCharts = !page.hasData ? [] : [
    ["records/s fed", [{name: "records/s", color: "#2563eb", values: rate}]],
    ["tasks", [{name: "done", color: "#16a34a", values: s.map((x) => x.tasks_done)},
      {name: "quarantined", color: "#dc2626", values: s.map((x) => x.tasks_quarantined)}]],
  ];
  const charts = dataCharts.concat([
    ["executors by state", executors.concat([{name: "ready", color: "#0891b2", values: s.map((x) => x.ready), dash: true}])],
    ["restarts", [{name: "restarts", color: "#b45309", values: s.map((x) => x.restarts)}]],
  ]);
  setHTML($("chart-grid"), charts.map(([title, series]) => chart(title, times, series)).join(""));
}

function chart(title, times, series) {
  const width = 460, height = 150, left = 44, right = 8, top = 8, bottom = 22;
  const t0 = times[0], t1 = times[times.length - 1];
  const peak = Math.max(1, ...series.flatMap((line) => line.values));
  const x = (t) => left + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (width - left - right);
  const y = (v) => top + (1 - v / peak) * (height - top - bottom);
  const lines = series.map((line) => {
    const points = line.values.map((v, i) => `${x(times[i]).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    return `<polyline fill="none" stroke="${line.color}" stroke-width="1.5"${line.dash ? ' stroke-dasharray="4 3"' : ""} ` +
      `points="${points}"><title>${esc(line.name)}</title></polyline>`;
  }).join("");
  const legend = series.map((line) => `<span><i style="background:${line.color}"></i>${esc(line.name)} ` +
    `${fmtNum(Math.round(line.values[line.values.length - 1] * 10) / 10)}</span>`).join("");
  const peakLabel = COMPACT.format(peak);
  return `<figure class="chart"><figcaption>${esc(title)}</figcaption>` +
    `<svg viewBox="0 0 ${width} ${height}" role="img" aria-label="${esc(title)}">` +
    `<line x1="${left}" y1="${height - bottom}" x2="${width - right}" y2="${height - bottom}" class="axis"/>` +
    `<line x1="${left}" y1="${top}" x2="${left}" y2="${height - bottom}" class="axis"/>` +
    `<text x="${left - 4}" y="${top + 8}" text-anchor="end">${esc(peakLabel)}</text>` +
    `<text x="${left - 4}" y="${height - bottom}" text-anchor="end">0</text>` +
    `<text x="${left}" y="${height - 6}">${esc(fmtTime(t0))}</text>` +
    `<text x="${width - right}" y="${height - 6}" text-anchor="end">${esc(fmtTime(t1))}</text>` +
    `${lines}</svg><div class="legend">${legend}</div></figure>`;
}

// --- logs: a panel tailing one executor's log -------------------------------------------------------

// `attempt`: an earlier incarnation's log (undefined: the current one's).
function openLog(executor, stream, attempt) {
  const generation = ++page.logGeneration;
  page.log = {executor, stream, attempt, offset: -LOG_CHUNK, generation};
  $("log-panel").hidden = false;
  setText($("log-title"), `${executor} ${stream}${attempt === undefined ? "" : ` (attempt ${attempt})`}`);
  $("log-text").textContent = "";
  const tick = async () => {
    if (page.stopped || !page.log || page.log.generation !== generation) return;
    let more = false;
    try {
      more = await readLog(page.log);
    } catch (error) {
      if (error instanceof SignedOut) return;
      appendLog(`\n[${error.message}]\n`);
      if (error.status === 404) return;
    }
    setTimeout(tick, more ? 0 : LOG_EVERY_MS);
  };
  tick();
}

// One slice from the current offset; true when it was full (more is waiting).
async function readLog(log) {
  const attempt = log.attempt === undefined ? "" : `&attempt=${enc(log.attempt)}`;
  const chunk = await call(`executors/${enc(log.executor)}/logs/${enc(log.stream)}?offset=${log.offset}&limit=${LOG_CHUNK}${attempt}`);
  if (page.log !== log) return false;
  const length = chunk.next_offset - chunk.offset;
  if (chunk.size != null && log.offset >= 0 && chunk.size < log.offset) {
    appendLog("\n[the log restarted: a new incarnation]\n");
    log.offset = -LOG_CHUNK;
    return true;
  }
  appendLog(chunk.text);
  log.offset = chunk.next_offset;
  return length >= LOG_CHUNK;
}

function appendLog(text) {
  if (!text) return;
  const pre = $("log-text");
  const node = pre.firstChild || pre.appendChild(document.createTextNode(""));
  node.appendData(text);
  if (node.length > LOG_KEPT_CHARS) node.deleteData(0, node.length - LOG_KEPT_CHARS);
  if ($("log-follow").checked) pre.scrollTop = pre.scrollHeight;
}

function closeLog() {
  page.log = null;
  $("log-panel").hidden = true;
}

// --- actions: each confirmed, each answered with the server's reply or error ------------------------

function notice(text, isError = false) {
  const box = $("notice");
  setText($("notice-text"), text);
  box.classList.toggle("error", isError);
  box.hidden = false;
}

async function act(label, path, body, describe) {
  try {
    const reply = await call(path, body);
    notice(`${label}: ${describe(reply)}`);
  } catch (error) {
    if (!(error instanceof SignedOut)) notice(`${label} failed: ${error.message}`, true);
    return;
  }
  refreshSoon();
}

function refreshSoon() {
  refreshStatus().catch(() => {});
  refreshTimeline().catch(() => {});
  refreshEvents().catch(() => {});
  if (page.hasData) refreshPartitions().catch(() => {});
}

function askReason(question) {
  const reason = window.prompt(`${question}\n\nReason (recorded with the event):`, "");
  return reason === null ? null : reason.trim();
}

const ACTIONS = {
  scale(el) {
    const role = el.dataset.role;
    const answer = window.prompt(`Scale role ${role} to how many executors? (now ${el.dataset.replicas})`,
      el.dataset.replicas);
    if (answer === null) return;
    const replicas = Number(answer.trim());
    if (!Number.isInteger(replicas) || replicas < 0) {
      notice(`Scale ${role}: replicas must be a whole number of 0 or more, got "${answer}"`, true);
      return;
    }
    act(`Scale ${role}`, `roles/${enc(role)}/scale`, {replicas}, (r) => `${r.role} now wants ${r.replicas} executors`);
  },
  restart(el) {
    const ex = page.executors.get(el.dataset.ex);
    const reason = askReason(`Restart executor ${el.dataset.ex}${ex ? ` (incarnation ${ex.incarnation})` : ""}? ` +
      "Its trainer is stopped and a replacement is started.");
    if (reason === null) return;
    act(`Restart ${el.dataset.ex}`, `executors/${enc(el.dataset.ex)}/restart`, {reason},
      (r) => `stopping incarnation ${r.incarnation}; a replacement follows`);
  },
  requeue(el) {
    const reason = askReason(`Put task ${el.dataset.task} back in the queue? It is read again from its start ` +
      "(the records of a done task are fed again).");
    if (reason === null) return;
    act(`Re-queue ${el.dataset.task}`, "data/tasks/requeue", {task: el.dataset.task, reason},
      (t) => `${t.id} is ${t.state}`);
  },
  async skip(el) {
    // The row may be seconds old: ask about the task as it is now, and the server refuses the skip if its
    // reader changed again before the answer (nobody is restarted unasked).
    const id = el.dataset.task;
    let holder = el.dataset.holder;
    try {
      const now = (await call(`data/tasks?q=${enc(id)}&limit=20`)).tasks.find((t) => t.id === id);
      if (now) holder = now.holder || "";
    } catch (error) {
      if (error instanceof SignedOut) return;
    }
    const reason = askReason(`Skip task ${id} (quarantine it: the rest of it is not read)?` +
      (holder ? ` Executor ${holder} is reading it now and will be restarted.` : " No executor is reading it now."));
    if (reason === null) return;
    act(`Skip ${id}`, "data/tasks/skip", {task: id, reason, holder: holder || ""},
      (t) => `${t.id} is ${t.state}`);
  },
  log(el) { openLog(el.dataset.ex, el.dataset.stream, el.dataset.attempt); },
  "executors-page"(el) {
    const entry = page.roles.get(el.dataset.role);
    entry.offset = Math.max(0, entry.offset + Number(el.dataset.step) * EXECUTORS_PER_PAGE);
    refreshRoleTable(entry).catch(showFetchError);
  },
  "task-state"(el) {
    $("task-state").value = el.dataset.state;
    taskFilterChanged();
  },
};

function onClick(event) {
  const el = event.target.closest("[data-act]");
  if (!el || !ACTIONS[el.dataset.act]) return;
  if (el.tagName === "A" && el.getAttribute("href") === "#") event.preventDefault();
  ACTIONS[el.dataset.act](el);
}

function dataAction(verb) {
  if (!window.confirm(`${verb[0].toUpperCase() + verb.slice(1)} the job's input? ` +
      (verb === "suspend" ? "Executors get no new tasks until it is resumed." : "Executors get tasks again."))) return;
  act(`${verb} data`, `data/${verb}`, {}, (d) => `data is ${d.state}`);
}

function killJob() {
  const reason = askReason(`Kill job ${page.job ? page.job.name : ""}? Every executor is stopped and the job ends as killed.`);
  if (reason === null) return;
  act("Kill job", "job/kill", {reason}, (r) => `the job is ${r.state}`);
}

async function logout() {
  try {
    await call("logout", {}, "");
  } catch (error) {
    if (!(error instanceof SignedOut)) {
      notice(`Sign out failed: ${error.message}`, true);
      return;
    }
  }
  window.location.href = "./";
}

let taskFilterTimer = 0;
function taskFilterChanged() {
  page.tasks.offset = 0;
  clearTimeout(taskFilterTimer);
  taskFilterTimer = setTimeout(() => refreshTasks().catch(showFetchError), 250);
}

function movePage(direction) {
  page.tasks.offset = Math.max(0, page.tasks.offset + direction * TASKS_PER_PAGE);
  refreshTasks().catch(showFetchError);
}

function wire() {
  document.addEventListener("click", onClick);
  $("kill-job").addEventListener("click", killJob);
  $("logout").addEventListener("click", logout);
  $("data-suspend").addEventListener("click", () => dataAction("suspend"));
  $("data-resume").addEventListener("click", () => dataAction("resume"));
  $("notice-close").addEventListener("click", () => { $("notice").hidden = true; });
  $("log-close").addEventListener("click", closeLog);
  $("task-state").addEventListener("change", taskFilterChanged);
  $("task-q").addEventListener("input", taskFilterChanged);
  $("task-prev").addEventListener("click", () => movePage(-1));
  $("task-next").addEventListener("click", () => movePage(1));
  $("event-filter").addEventListener("input", () => { page.eventsDirty = true; renderEvents(); });
  $("partitions-box").addEventListener("toggle", () => refreshPartitions().catch(showFetchError));
  $("spec-box").addEventListener("toggle", loadSpec, {once: true});
}

async function loadSpec() {
  try {
    $("spec").textContent = JSON.stringify(await call("spec"), null, 2);
  } catch (error) {
    if (!(error instanceof SignedOut)) $("spec").textContent = `Could not load the spec: ${error.message}`;
  }
}

async function whoami() {
  try {
    const me = await call("whoami");
    page.live = me.live;
    setText($("user"), `signed in as ${me.user}`);
    setText($("app-id"), me.app_id);
  } catch (error) {
    if (!(error instanceof SignedOut)) showFetchError(error);
  }
  document.body.classList.toggle("readonly", !page.live);
}

async function start() {
  wire();
  let first = true;
  // Who we are and the first status travel together.
  await Promise.all([whoami(), every(STATUS_EVERY_MS, () => {
    const withEvents = first;
    first = false;
    return refreshStatus(withEvents);
  })]);
  if (page.stopped) return;
  every(STATUS_EVERY_MS, refreshEvents);
  // With the status: the charts' last point is this moment's, so they agree with the tables.
  every(STATUS_EVERY_MS, refreshTimeline);
}

start();
