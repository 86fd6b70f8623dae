// The Primus panel: a task instance's Primus job in a tab of its page in Airflow's UI.
// It polls the plugin's API (signed in by Airflow's session cookie) every 3 s and redraws; once the
// job ended it shows the final page (from what the AM left) and stops. Actions are offered only to a
// user Airflow lets edit the task instance (the API says: can_edit), and the API checks again.
"use strict";

const POLL_MS = 3000;
const EVENTS_SHOWN = 20;
const SAMPLES_KEPT = 2000;
const ACTIVE_STATES = ["new", "starting", "registered", "running"];
const EXECUTOR_STATES = ["new", "starting", "registered", "running", "succeeded", "failed", "lost", "stopped"];
const PALETTE = {new: "#9ca3af", starting: "#f59e0b", registered: "#a855f7", running: "#2563eb",
  succeeded: "#16a34a", failed: "#dc2626", lost: "#7f1d1d", stopped: "#6b7280"};
const CONFIRM_MS = 5000;

const api = document.body.dataset.api;  // GET .../api/panel/DAG/TASK?run_id=..&map_index=..
// armed: action buttons clicked once, by key, until when a second click confirms (kept here, as the
// tables are redrawn at every poll).
const panel = {samples: [], live: true, canEdit: false, stopped: false, reply: null, armed: {}};

const $ = (id) => document.getElementById(id);
const esc = (value) => String(value ?? "").replace(/[&<>"']/g,
  (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})[c]);
const fmtNum = (n) => n == null ? "" : Number(n).toLocaleString("en-US");
const fmtTime = (epoch) => epoch ? new Date(epoch * 1000).toLocaleString() : "";
const COMPACT = new Intl.NumberFormat("en-US", {notation: "compact", maximumFractionDigits: 1});

function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; i++) n /= 1024;
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function fmtDuration(seconds) {
  if (seconds == null) return "unknown";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

const badge = (state) => `<span class="state ${esc(state)}">${esc(state)}</span>`;
const rows = (head, body) => `<thead><tr>${head.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead>` +
  `<tbody>${body.join("")}</tbody>`;
const pairs = (items) => items.filter(([, v]) => v !== undefined)
  .map(([name, value]) => `<tr><th>${esc(name)}</th><td class="wrap">${value}</td></tr>`).join("");

function notice(text, isError = false) {
  const box = $("notice");
  box.textContent = text;
  box.classList.toggle("error", isError);
  box.hidden = !text;
}

// --- the API ----------------------------------------------------------------------------------------

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function call(url, body) {
  const init = {credentials: "same-origin", headers: {Accept: "application/json"}};
  if (body !== undefined) {
    // JSON with its content type: the API refuses anything else (a cross-site form cannot send it).
    Object.assign(init, {method: "POST", body: JSON.stringify(body)});
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(url, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const detail = typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail ?? response.statusText);
    throw new HttpError(response.status, detail);
  }
  return data;
}

// `.../api/panel/DAG/TASK?q` -> `.../api/panel/DAG/TASK/ACTION?q`
function actionUrl(action) {
  const [path, query] = api.split("?");
  return `${path}/${action}?${query}`;
}

// A live AM ends its timeline with a sample of this moment: dropped at the next poll, so that the
// kept samples stay evenly spaced.
function timelineSince() {
  if (panel.live && panel.samples.length) panel.samples.pop();
  return panel.samples.length ? panel.samples[panel.samples.length - 1].time : 0;
}

async function poll() {
  if (panel.stopped) return;
  if (document.hidden) return void setTimeout(poll, POLL_MS);  // nobody looks: no request
  const since = timelineSince();
  try {
    const reply = await call(`${api}&since=${since}`);
    notice("");
    show(reply, since);
  } catch (error) {
    if (error.status === 401) {
      panel.stopped = true;
      return notice("You are signed out of Airflow: reload the page to sign in again.", true);
    }
    if (error.status === 404 && !panel.reply) showNoJob(error.message);
    else notice(error.message, true);
  }
  if (panel.live) setTimeout(poll, POLL_MS);
}

function showNoJob(message) {
  $("title").textContent = "Primus job";
  $("headline").textContent = `No Primus job: ${message}.`;
  $("job").hidden = true;
}

// --- drawing ----------------------------------------------------------------------------------------

function show(reply, since) {
  panel.reply = reply;
  panel.live = reply.live;
  panel.canEdit = reply.can_edit && reply.live;
  const samples = reply.timeline ? reply.timeline.samples : [];
  panel.samples.push(...samples.filter((s) => s.time > since));
  if (panel.samples.length > SAMPLES_KEPT) panel.samples = panel.samples.filter((_, i) => i % 2 === 0);

  const status = reply.status;
  const job = status.job;
  $("title").textContent = `Primus job ${job.name} (${reply.app_id})`;
  $("headline").innerHTML = `${badge(job.state)} ${esc(job.reason)}` +
    (job.stopping ? ` &mdash; stopping: ${esc(job.stopping)}` : "");
  $("updated").textContent = reply.live
    ? `Live, refreshed every ${POLL_MS / 1000} s: ${new Date().toLocaleTimeString()}. Connection: ${reply.connection}.`
    : `Connection: ${reply.connection}.`;
  $("job").hidden = false;
  $("job-actions").hidden = !panel.canEdit;
  showEnded(reply);
  if (!$("roles").contains(document.activeElement)) showRoles(status.roles);  // not under the user's typing
  showExecutors(reply.executors);
  showData(status.data);
  showGoodput(status.goodput);
  showCharts(Boolean(status.data));
  showEvents(status.events);
}

function showEnded(reply) {
  const box = $("ended");
  box.hidden = reply.live;
  if (reply.live) return;
  const job = reply.status.job;
  box.innerHTML = `<p>The job ended: ${badge(job.state)} at ${esc(fmtTime(job.finished_at))}. This is its ` +
    `final page, from what its AM left.</p><p>Its full page (logs, tasks): run ` +
    `<code>${esc(reply.ui_command)}</code> where its Primus home or cluster configuration is at hand.</p>` +
    (reply.cluster_page ? `<p>The cluster's page: <a href="${esc(reply.cluster_page)}" target="_blank" ` +
      `rel="noopener">${esc(reply.cluster_page)}</a></p>` : "");
}

function showRoles(roles) {
  const body = roles.map((role) => {
    const states = Object.entries(role.states).filter(([, n]) => n).map(([s, n]) => `${n} ${esc(s)}`).join(", ");
    const scale = panel.canEdit ? `<td><input class="replicas" type="number" min="0" value="${esc(role.replicas)}" ` +
      `data-role="${esc(role.name)}" aria-label="replicas of ${esc(role.name)}"> ` +
      `<button type="button" data-scale="${esc(role.name)}">Scale</button></td>` : "";
    return `<tr data-role-row="${esc(role.name)}"><td>${esc(role.name)}</td><td>${esc(role.replicas)}</td>` +
      `<td>${states}</td><td>${esc(role.ready)}</td><td>${esc(role.restarts)}</td><td>${esc(role.failures)}</td>` +
      `${scale}</tr>`;
  });
  const head = ["role", "replicas", "executors", "ready", "restarts", "failures"];
  $("roles").innerHTML = rows(panel.canEdit ? head.concat(["scale"]) : head, body);
}

function showExecutors(page) {
  // A page of them (the API's first EXECUTOR_ROWS): a job of thousands has its counts in the roles.
  const shown = $("executors-shown");
  shown.hidden = page.total <= page.executors.length;
  shown.textContent = `The first ${fmtNum(page.executors.length)} of ${fmtNum(page.total)} executors.`;
  const body = page.executors.map((ex) => {
    const restart = panel.canEdit && ACTIVE_STATES.includes(ex.state) ? actionButton(`restart:${ex.id}`, "Restart",
      `data-restart="${esc(ex.id)}"`) : "";
    return `<tr><td>${esc(ex.id)}</td><td>${badge(ex.state)}</td><td>${esc(ex.restarts ?? "")}</td>` +
      `<td>${ex.ready ? "yes" : "no"}</td><td>${esc(ex.host ?? "")}</td><td>${esc(ex.exit_code ?? "")}</td>` +
      `<td class="wrap">${esc(ex.reason)}</td>${panel.canEdit ? `<td>${restart}</td>` : ""}</tr>`;
  });
  const head = ["executor", "state", "restarts", "ready", "host", "exit code", "reason"];
  $("executors").innerHTML = rows(panel.canEdit ? head.concat([""]) : head, body);
}

function showData(data) {
  $("data-section").hidden = !data;
  if (!data) return;
  const tasks = data.tasks;
  // 100 % only once every task was read: the bytes may reach the total a little before the last task
  // is marked done, and a quarantined task was never read (the provider's progress says the same).
  const share = data.progress ?? data.progress_of_discovered;
  const allRead = data.scan_complete && tasks.total > 0 && tasks.done === tasks.total;
  const progress = share == null ? null : allRead ? 1 : Math.min(share, 0.999);
  $("data-progress").value = progress || 0;
  $("data").innerHTML = pairs([
    ["state", badge(data.state)],
    ["tasks", `<span id="data-done">${fmtNum(tasks.done)} of ${fmtNum(tasks.total)} done</span>` +
      (tasks.running ? `, ${fmtNum(tasks.running)} running` : "") +
      (tasks.quarantined ? `, ${fmtNum(tasks.quarantined)} quarantined` : "")],
    ["progress", progress == null ? "unknown" : `${(progress * 100).toFixed(1)} %` +
      (data.progress == null ? " of the data listed so far" : "")],
    ["records", fmtNum(data.records_done)],
    ["bytes", `${fmtBytes(data.bytes.done)} of ${fmtBytes(data.bytes.total)}`],
    ["rate", `${fmtBytes(data.rate_bytes_per_s)}/s`],
    ["ETA", data.eta_seconds == null ? "unknown" : fmtDuration(data.eta_seconds)],
    ["watermark", esc(data.watermark ?? "none yet")],
    ["waiting for", data.waiting_for ? esc(data.waiting_for) : undefined],
    ["failure", data.failure ? esc(data.failure) : undefined],
  ]);
  const kafka = data.kafka;
  $("kafka").hidden = !kafka;
  if (kafka) {
    $("kafka").innerHTML = pairs([
      ["Kafka", `${esc(kafka.topics.join(", "))} (group ${esc(kafka.group)})`],
      ["lag", kafka.lag == null ? "unknown" : `${fmtNum(kafka.lag)} records`],
      ["rate", `${fmtNum(Math.round(kafka.records_per_s))} records/s`],
      ["ETA", kafka.eta_seconds == null ? "unknown" : fmtDuration(kafka.eta_seconds)],
      ["watermark", esc(kafka.watermark ?? "none yet")],
      ["brokers", kafka.reachable ? "reachable" : `unreachable since ${esc(kafka.unreachable_since)}`],
    ]);
  }
}

function showGoodput(goodput) {
  $("goodput-section").hidden = !goodput;
  if (!goodput) return;
  const causes = Object.entries(goodput.seconds).map(([cause, seconds]) =>
    [cause.replaceAll("_", " "), `${fmtNum(Math.round(seconds))} executor-seconds`]);
  $("goodput").innerHTML = pairs([
    ["ratio (ETTR)", goodput.ratio == null ? "not known yet" : `${(goodput.ratio * 100).toFixed(1)} %`],
    ...causes,
  ]);
}

function showEvents(events) {
  const latest = events.slice(-EVENTS_SHOWN).reverse();
  $("events").innerHTML = rows(["time", "subject", "change", "reason", "by"], latest.map((e) =>
    `<tr><td>${esc(fmtTime(e.time))}</td><td>${esc(e.subject)}</td><td>${esc(e.from_state || "")} &rarr; ` +
    `${badge(e.to_state)}${e.exit_code == null ? "" : ` (exit ${esc(e.exit_code)})`}</td>` +
    `<td class="wrap">${esc(e.reason)}</td><td>${esc(e.actor || "")}</td></tr>`));
}

// --- charts: inline SVG from the timeline's samples --------------------------------------------------

function showCharts(hasData) {
  const s = panel.samples;
  if (s.length < 2) {
    $("charts").textContent = "Not enough samples yet.";
    return;
  }
  const times = s.map((x) => x.time);
  const rate = s.map((x, i) => i === 0 ? 0 :
    Math.max(0, (x.records_done - s[i - 1].records_done) / Math.max(1e-3, x.time - s[i - 1].time)));
  const executors = EXECUTOR_STATES.filter((state) => s.some((x) => x.executors[state]))
    .map((state) => ({name: state, color: PALETTE[state], values: s.map((x) => x.executors[state] || 0)}));
  const charts = (hasData ? [
    ["records/s fed", [{name: "records/s", color: "#2563eb", values: rate}]],
    ["tasks", [{name: "done", color: "#16a34a", values: s.map((x) => x.tasks_done)},
      {name: "quarantined", color: "#dc2626", values: s.map((x) => x.tasks_quarantined)}]],
  ] : []).concat([
    ["executors by state", executors.concat([{name: "ready", color: "#0891b2", values: s.map((x) => x.ready), dash: true}])],
    ["restarts", [{name: "restarts", color: "#b45309", values: s.map((x) => x.restarts)}]],
  ]);
  $("charts").innerHTML = charts.map(([title, series]) => chart(title, times, series)).join("");
}

// Colours are SVG attributes, not style: the page's Content-Security-Policy allows no inline style.
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
  const legend = series.map((line) => `<span><svg width="10" height="10"><rect width="10" height="10" ` +
    `fill="${line.color}"/></svg> ${esc(line.name)} ${fmtNum(Math.round(line.values[line.values.length - 1] * 10) / 10)}` +
    `</span>`).join("");
  return `<figure class="chart"><figcaption>${esc(title)}</figcaption>` +
    `<svg viewBox="0 0 ${width} ${height}" role="img" aria-label="${esc(title)}">` +
    `<line x1="${left}" y1="${height - bottom}" x2="${width - right}" y2="${height - bottom}" class="axis"/>` +
    `<line x1="${left}" y1="${top}" x2="${left}" y2="${height - bottom}" class="axis"/>` +
    `<text x="${left - 4}" y="${top + 8}" text-anchor="end">${esc(COMPACT.format(peak))}</text>` +
    `<text x="${left - 4}" y="${height - bottom}" text-anchor="end">0</text>` +
    `<text x="${left}" y="${height - 6}">${esc(new Date(t0 * 1000).toLocaleTimeString())}</text>` +
    `<text x="${width - right}" y="${height - 6}" text-anchor="end">${esc(new Date(t1 * 1000).toLocaleTimeString())}</text>` +
    `${lines}</svg><div class="legend">${legend}</div></figure>`;
}

// --- actions: each confirmed by a second click (the iframe's sandbox allows no confirm() dialog) -------

function isArmed(key) {
  return (panel.armed[key] || 0) > Date.now();
}

function actionButton(key, label, attributes) {
  const armedNow = isArmed(key);
  return `<button type="button" ${attributes}${armedNow ? ' class="armed"' : ""}>${esc(label)}` +
    `${armedNow ? ": click again to confirm" : ""}</button>`;
}

// True on the confirming click; the first one arms the button for CONFIRM_MS.
function confirmed(key, button) {
  if (isArmed(key)) {
    delete panel.armed[key];
    return true;
  }
  panel.armed[key] = Date.now() + CONFIRM_MS;
  const label = button.textContent;
  button.classList.add("armed");
  button.textContent = `${label}: click again to confirm`;
  setTimeout(() => {
    button.classList.remove("armed");
    button.textContent = label;
  }, CONFIRM_MS);
  return false;
}

async function act(action, body) {
  try {
    const reply = await call(actionUrl(action), body);
    notice(reply.message);
  } catch (error) {
    notice(`${action}: ${error.message}`, true);
  }
}

document.addEventListener("click", (event) => {
  const button = event.target.closest("button");
  if (!button || !panel.canEdit) return;
  if (button.id === "kill") {
    if (confirmed("kill", button)) act("kill", {reason: ""});
  } else if (button.dataset.scale) {
    const role = button.dataset.scale;
    const input = document.querySelector(`input.replicas[data-role="${CSS.escape(role)}"]`);
    act("scale", {role, replicas: Number(input.value)});
  } else if (button.dataset.restart) {
    const executor = button.dataset.restart;
    if (confirmed(`restart:${executor}`, button)) act("restart", {executor, reason: ""});
  }
});

poll();
