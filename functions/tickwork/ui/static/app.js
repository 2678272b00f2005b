// Tickwork console: one page over the same API as every other client, with the caller's token.
// No framework and no build step: the DOM is built with `h` (text is never parsed as HTML).
"use strict";

const TOKEN_KEY = "tickwork-token";
// gen: bumped by every render, so an older render (or its timer) that finishes late cannot draw over a newer
// page; flash: a message for the next page (set just before navigating); paused: live updates stopped.
const state = {
  config: null, token: sessionStorage.getItem(TOKEN_KEY), pages: {}, timers: [], gen: 0, flash: null, paused: false,
};

// --- small helpers -------------------------------------------------------------------------------------

// Run states that never change again.
const TERMINAL = ["succeeded", "failed", "skipped", "missed", "cancelled", "excluded"];

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A check that the render which called it is still the current one.
function alive() {
  const gen = state.gen;
  return () => gen === state.gen;
}

// Run `fn` after `delay` ms unless another render came first or live updates are paused.
function later(fn, delay) {
  const live = alive();
  state.timers.push(setTimeout(() => { if (live() && !state.paused) fn(); }, delay));
}

// Go to `hash`, rendering even when it is already the address (no hashchange then).
function go(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

function flash(message, kind = "ok") {
  state.flash = { message, kind };
}

function say(message, kind = "ok") {
  const status = document.getElementById("status");
  status.replaceChildren(message ? h("span", { class: kind }, message) : "");
}

// A form field: its label (the input's accessible name), the input, and where its error is shown.
function field(id, label, input, error) {
  return h("div", { class: "field" }, h("label", { for: id }, label), input, error || null);
}

function when(value) {
  if (!value) return "–";
  return new Date(value).toISOString().replace(".000Z", "Z");
}

function ms(value) {
  if (value === null || value === undefined) return "–";
  return value >= 10000 ? `${(value / 1000).toFixed(1)} s` : `${Math.round(value)} ms`;
}

class ApiError extends Error {
  constructor(status, problem) {
    // problem+json from the API, or API Gateway's own {"message": ...} (throttling, the JWT authorizer).
    super(problem.detail || problem.message || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
  fieldErrors() {
    return this.problem.errors || [];
  }
}

async function api(method, path, { body, headers, query } = {}) {
  let url = path;
  if (query) {
    const wanted = Object.entries(query).filter(([, v]) => v !== null && v !== undefined && v !== "");
    if (wanted.length) url += "?" + new URLSearchParams(wanted).toString();
  }
  const sent = { Accept: "application/json", ...(headers || {}) };
  if (state.token) sent.Authorization = `Bearer ${state.token}`;
  if (body !== undefined) sent["Content-Type"] = "application/json";
  const response = await fetch(url, {
    method,
    headers: sent,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let parsed = null;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      // Not JSON (a proxy's HTML error page): keep the status, so a 401 still signs out.
      if (response.ok) throw new Error(`${method} ${path}: the answer was not JSON`);
      parsed = { title: response.statusText || `HTTP ${response.status}`, detail: text.slice(0, 200) };
    }
  }
  if (!response.ok) throw new ApiError(response.status, parsed || { title: response.statusText });
  return { status: response.status, headers: response.headers, body: parsed };
}

function failed(error) {
  if (error instanceof ApiError && error.status === 401) {
    signOut("Your token was not accepted: sign in again.", "error");
    return;
  }
  if (error instanceof ApiError && error.status === 412) {
    say("Someone else changed this job since you opened it: reload to see their change, then try again.", "error");
    return;
  }
  say(error instanceof ApiError ? `${error.status}: ${error.message}` : String(error), "error");
}

function view(title, ...content) {
  document.title = `${title} · Tickwork`;
  const main = document.getElementById("main");
  main.replaceChildren(h("h1", {}, title), ...content);
}

// --- sign in -------------------------------------------------------------------------------------------

function signOut(message, kind = "ok") {
  state.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  if (message) flash(message, kind);
  go("#/signin");
}

function signInView() {
  const auth = state.config ? state.config.auth : "bearer";
  if (auth === "iam") {
    view(
      "Sign in",
      h("p", {}, "This deployment authenticates API calls with AWS IAM (SigV4), which a browser cannot sign."),
      h("p", {}, "To use the console, deploy the stack with a JWT authorizer: ",
        h("code", {}, "make deploy CDK_ARGS=\"-c jwt_issuer=https://issuer.example.com -c jwt_audience=tickwork\""),
        ", then sign in here with an access token from that issuer. The CLI and SDKs work with IAM as they are."),
      state.config && state.config.dashboard_url
        ? h("p", {}, h("a", { href: state.config.dashboard_url }, "The CloudWatch dashboard")) : null,
    );
    return;
  }
  const input = h("input", { id: "token", name: "token", type: "password", autocomplete: "off", required: true });
  const hint = auth === "jwt"
    ? "An access token (JWT) from the issuer this deployment trusts."
    : "A token of this instance (`tickwork local --token TOKEN=OWNER`; by default local-dev-token).";
  const form = h("form", { class: "inline", onsubmit: async (event) => {
    event.preventDefault();
    state.token = input.value.trim();
    try {
      await api("GET", "/jobs", { query: { limit: 1 } });
      sessionStorage.setItem(TOKEN_KEY, state.token);
      flash("Signed in.");
      // Straight on to the page the address asked for (a shared link), or the jobs.
      go(location.hash && location.hash !== "#/signin" ? location.hash : "#/jobs");
    } catch (error) {
      state.token = null;
      say(error instanceof ApiError && error.status === 401 ? "That token was not accepted." : String(error), "error");
    }
  } }, field("token", "API token", input), h("button", { type: "submit" }, "Sign in"));
  view("Sign in", h("p", { class: "muted" }, hint), form);
}

// --- how runs end --------------------------------------------------------------------------------------

const COMPLETION_WORDS = {
  response: "response: the target's answer is the outcome",
  callback: "callback: the target reports to its completion URL",
  delivery: "delivery: a run ends when the message is accepted",
};

// How a job's runs end, in words (with a callback job's heartbeat).
function completionText(job) {
  const completion = job.completion || "response";
  const words = COMPLETION_WORDS[completion] || completion;
  if (completion !== "callback") return words;
  return job.heartbeat_seconds ? `${words}; heartbeat every ${job.heartbeat_seconds} s` : `${words}; no heartbeat`;
}

// A run's state as people read it: a delivery run that succeeded was delivered (the message was accepted),
// which says nothing of whether the work then succeeded.
function stateText(run) {
  return run.result === "delivered" ? "delivered" : run.state;
}

function runState(run) {
  return h("span", { class: `state ${stateText(run)}` }, stateText(run));
}

// --- jobs ----------------------------------------------------------------------------------------------

function runMarks(runs) {
  return h("span", { class: "marks", role: "img",
    "aria-label": runs.length ? `last runs: ${runs.map(stateText).join(", ")}` : "no runs yet" },
    runs.slice(0, 8).reverse().map((r) => h("span", { class: `mark ${stateText(r)}`, title: `${stateText(r)} ${when(r.timings.scheduled_for)}` })));
}

// Of the finished runs, how many succeeded; for runs that were only delivered it says so.
function successRate(runs) {
  const done = runs.filter((r) => ["succeeded", "failed"].includes(r.state));
  if (!done.length) return "–";
  const good = done.filter((r) => r.state === "succeeded");
  const delivered = good.length && good.every((r) => r.result === "delivered") ? " delivered" : "";
  return `${Math.round((100 * good.length) / done.length)} %${delivered} of ${done.length}`;
}

async function jobsView(params) {
  const live = alive();
  const filters = { state: params.get("state") || "", tag: params.get("tag") || "", name: params.get("name") || "",
    group: params.get("group") || "" };
  const cursor = params.get("cursor") || "";
  const page = (await api("GET", "/jobs", { query: { limit: 20, cursor, ...filters } })).body;
  const rows = await Promise.all(page.items.map(async (job) => {
    // One job's runs not answering (deleted meanwhile, throttled) leaves its marks empty, not the page.
    const runs = await api("GET", `/jobs/${encodeURIComponent(job.id)}/runs`, { query: { limit: 10 } })
      .then((answer) => answer.body.items, () => null);
    return h("tr", {},
      h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, job.name)),
      h("td", {}, job.schedule.description, h("div", { class: "muted" }, `${job.schedule.expression} · ${job.schedule.timezone}`)),
      h("td", {}, h("span", { class: `state ${job.state}` }, job.state)),
      h("td", {}, when(job.next_fire_at)),
      h("td", {}, runs ? runMarks(runs) : "–"),
      h("td", {}, runs ? successRate(runs) : "–"));
  }));
  const stateSelect = h("select", { id: "filter-state", name: "state" },
    ["", "active", "paused"].map((v) => h("option", { value: v, selected: v === filters.state }, v || "any")));
  const nameInput = h("input", { id: "filter-name", name: "name", type: "search", value: filters.name });
  const tagInput = h("input", { id: "filter-tag", name: "tag", placeholder: "key=value", value: filters.tag });
  const groupInput = h("input", { id: "filter-group", name: "group", value: filters.group, autocomplete: "off" });
  const filterForm = h("form", { class: "filters", role: "search", onsubmit: (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    if (stateSelect.value) next.set("state", stateSelect.value);
    if (nameInput.value.trim()) next.set("name", nameInput.value.trim());
    if (tagInput.value.trim()) next.set("tag", tagInput.value.trim());
    if (groupInput.value.trim()) next.set("group", groupInput.value.trim());
    go(`#/jobs?${next}`);
  } }, field("filter-name", "Name contains", nameInput), field("filter-state", "State", stateSelect),
  field("filter-tag", "Tag", tagInput), field("filter-group", "Group", groupInput),
  h("button", { type: "submit" }, "Filter"));
  // The cursors of the pages seen with these filters, in order ("" is the first page): Previous goes to the
  // one before the current cursor, so the browser's Back and a reloaded address keep working.
  const key = JSON.stringify(filters);
  const history = state.pages[key] || (state.pages[key] = [""]);
  let here = history.indexOf(cursor);
  if (here < 0) { history.push(cursor); here = history.length - 1; }
  const at = (target) => {
    const next = new URLSearchParams(params);
    if (target) next.set("cursor", target); else next.delete("cursor");
    go(`#/jobs?${next}`);
  };
  const pager = h("div", { class: "pager" },
    cursor ? h("button", { type: "button", class: "secondary", onclick: () => at(here > 0 ? history[here - 1] : "") },
      "Previous page") : null,
    page.next_cursor ? h("button", { type: "button", class: "secondary", onclick: () => {
      history.splice(here + 1, Infinity, page.next_cursor);
      at(page.next_cursor);
    } }, "Next page") : null);
  const filtered = Boolean(filters.state || filters.tag || filters.name || filters.group);
  if (!live()) return;
  view("Jobs",
    h("div", { class: "actions" }, h("a", { class: "button", href: "#/new" }, "New job")),
    filterForm,
    page.items.length
      ? h("table", {}, h("caption", { class: "visually-hidden" }, "Your jobs"),
        h("thead", {}, h("tr", {}, ["Name", "Schedule", "State", "Next fire (UTC)", "Last runs", "Success"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, rows))
      : h("p", { class: "muted" }, page.next_cursor
        ? "No match in this stretch of your jobs: Next page searches on."
        : filtered ? "No job matches." : "No jobs here yet."),
    pager);
}

// The schedule editor, shared by "new job" and "edit schedule": every change is checked by
// /schedules/preview as the user types, and its errors are shown at the field they are about.
function scheduleEditor(initial, onValid) {
  // The rest of a saved schedule (DST policies, jitter, bounds) shapes its fires too: preview with it.
  const rest = Object.fromEntries(["start_at", "end_at", "jitter_seconds", "dst_gap", "dst_repeat"]
    .filter((k) => initial[k] !== null && initial[k] !== undefined).map((k) => [k, initial[k]]));
  const expression = h("input", { id: "expression", name: "expression", value: initial.expression || "", required: true,
    "aria-describedby": "expression-error", autocomplete: "off", spellcheck: "false" });
  const timezone = h("input", { id: "timezone", name: "timezone", value: initial.timezone || "UTC", required: true,
    "aria-describedby": "timezone-error", autocomplete: "off" });
  const expressionError = h("div", { id: "expression-error", class: "field-error", "aria-live": "polite" });
  const timezoneError = h("div", { id: "timezone-error", class: "field-error", "aria-live": "polite" });
  const preview = h("div", { id: "preview", "aria-live": "polite" });
  let timer = null;
  let latest = 0;
  const check = async () => {
    const asked = ++latest;
    for (const [input, error] of [[expression, expressionError], [timezone, timezoneError]]) {
      input.removeAttribute("aria-invalid");
      error.textContent = "";
    }
    try {
      const result = (await api("POST", "/schedules/preview", {
        body: { ...rest, expression: expression.value.trim(), timezone: timezone.value.trim(), count: 5 } })).body;
      if (asked !== latest) return;
      preview.replaceChildren(h("p", { class: "muted" }, result.description),
        h("ol", {}, result.fires.map((f) => h("li", {}, `${when(f.at)} (${f.local})`, f.dst ? h("span", { class: "dst" }, ` ${f.dst}`) : null))));
      onValid(true);
    } catch (error) {
      if (asked !== latest) return;
      onValid(false);
      preview.replaceChildren();
      // Only a refused schedule is the user's to fix here; anything else (401, 429, 5xx) is reported as such.
      if (!(error instanceof ApiError) || ![400, 422].includes(error.status)) { failed(error); return; }
      const errors = error.fieldErrors();
      for (const item of errors.length ? errors : [{ field: "expression", message: error.message }]) {
        const onTimezone = String(item.field || "").endsWith("timezone");
        (onTimezone ? timezone : expression).setAttribute("aria-invalid", "true");
        (onTimezone ? timezoneError : expressionError).textContent = item.message;
      }
    }
  };
  const schedule = () => { clearTimeout(timer); timer = setTimeout(check, 250); };
  expression.addEventListener("input", schedule);
  timezone.addEventListener("input", schedule);
  if (initial.expression) check();
  return {
    fields: [
      field("expression", "Cron expression", expression, expressionError),
      field("timezone", "Time zone", timezone, timezoneError),
    ],
    preview,
    value: () => ({ expression: expression.value.trim(), timezone: timezone.value.trim() }),
  };
}

function newJobView() {
  let valid = false;
  const submit = h("button", { type: "submit", disabled: true }, "Create job");
  const editor = scheduleEditor({}, (ok) => { valid = ok; submit.disabled = !ok; });
  const name = h("input", { id: "name", name: "name", required: true, autocomplete: "off" });
  const url = h("input", { id: "url", name: "url", type: "url", required: true, placeholder: "https://example.com/hook" });
  // One key per form content: sending the same job again after a lost answer creates it once.
  let key = crypto.randomUUID();
  const form = h("form", { oninput: () => { key = crypto.randomUUID(); }, onsubmit: async (event) => {
    event.preventDefault();
    if (!valid) return;
    try {
      const job = (await api("POST", "/jobs", { body: {
        name: name.value.trim(), schedule: editor.value(),
        target: { kind: "http", config: { url: url.value.trim(), method: "POST" } } },
        headers: { "Idempotency-Key": key } })).body;
      flash(`Created ${job.name}.`);
      go(`#/jobs/${encodeURIComponent(job.id)}`);
    } catch (error) { failed(error); }
  } },
  h("div", { class: "filters" }, field("name", "Name", name), ...editor.fields,
    field("url", "Target URL (HTTP POST)", url)),
  h("h2", {}, "Next fires"), editor.preview, submit);
  view("New job", form);
}

function chart(runs) {
  // Start delay and duration of the last runs, oldest on the left (drawn as two polylines).
  const points = runs.filter((r) => r.timings.started_at).slice(0, 50).reverse();
  if (points.length < 2) return h("p", { class: "muted" }, "The chart appears once two runs have started.");
  const width = 900, height = 220, pad = 36;
  const delay = points.map((r) => r.timings.start_delay_ms || 0);
  const duration = points.map((r) => r.timings.finished_at
    ? new Date(r.timings.finished_at) - new Date(r.timings.started_at) : 0);
  const top = Math.max(1, ...delay, ...duration);
  const x = (i) => pad + (i * (width - 2 * pad)) / (points.length - 1);
  const y = (v) => height - pad - (v * (height - 2 * pad)) / top;
  const line = (values, color) => svg("polyline", { points: values.map((v, i) => `${x(i)},${y(v)}`).join(" "),
    fill: "none", stroke: color, "stroke-width": 2 });
  return svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `Start delay (blue) and duration (green) of the last ${points.length} runs; highest ${ms(top)}` },
  svg("line", { x1: pad, y1: height - pad, x2: width - pad, y2: height - pad, stroke: "#7a8594" }),
  svg("text", { x: 4, y: pad - 8, "font-size": 12, fill: "#4a5360" }, ms(top)),
  svg("text", { x: 4, y: height - pad, "font-size": 12, fill: "#4a5360" }, "0"),
  svg("text", { x: width - 300, y: 18, "font-size": 12, fill: "#0b57d0" }, "start delay"),
  svg("text", { x: width - 200, y: 18, "font-size": 12, fill: "#146c2e" }, "duration"),
  line(delay, "#0b57d0"), line(duration, "#146c2e"));
}

// A job's alert rules in words (docs/alerts.md): the ones set, and where they are told.
function alertsText(alerts) {
  const rules = [];
  if (alerts.on_failure) rules.push("failed runs");
  if (alerts.on_dead_letter) rules.push("dead letters");
  if (alerts.on_skip) rules.push("skipped or missed slots");
  if (alerts.late_after_seconds) rules.push(`starts later than ${alerts.late_after_seconds} s`);
  if (alerts.deadline_seconds) rules.push(`not done ${alerts.deadline_seconds} s after its time`);
  if (alerts.duration_min_seconds || alerts.duration_max_seconds)
    rules.push(`durations outside ${alerts.duration_min_seconds || 0}-${alerts.duration_max_seconds || "∞"} s`);
  if (alerts.anomaly_factor) rules.push(`durations ${alerts.anomaly_factor}x off its median`);
  if (alerts.failures_in_a_row) rules.push(`${alerts.failures_in_a_row} failures in a row`);
  if (alerts.auto_pause_after) rules.push(`pause after ${alerts.auto_pause_after} failures in a row`);
  const where = alerts.channels.length
    ? alerts.channels.map((c) => `${c.kind} ${c.url || c.topic_arn}`).join(", ")
    : "recorded only (no channel)";
  return `${rules.join(", ") || "nothing"} → ${where}; at most one message per kind per ${alerts.window_seconds} s`;
}

function eventsTable(items, withJob) {
  const heads = withJob ? ["When", "Event", "Job", "Run", "Detail"] : ["When", "Event", "Run", "Detail"];
  return h("table", { class: "events" }, h("thead", {}, h("tr", {}, heads.map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, items.map((e) => h("tr", {},
      h("td", {}, when(e.at)), h("td", {}, h("span", { class: `event ${e.kind}` }, e.kind.replaceAll("_", " "))),
      withJob ? h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(e.job_id)}` }, e.job_id)) : null,
      h("td", {}, e.run_id
        ? h("a", { href: `#/jobs/${encodeURIComponent(e.job_id)}/runs/${encodeURIComponent(e.run_id)}` }, e.run_id.split(":")[1])
        : "–"),
      h("td", {}, e.detail)))));
}

async function eventsView(params) {
  const live = alive();
  const cursor = params.get("cursor") || "";
  const page = (await api("GET", "/events", { query: { limit: 50, cursor } })).body;
  if (!live()) return;
  view("Events across your jobs",
    h("p", { class: "muted" }, "What your jobs' rules noticed, newest first: failures, late starts, missed deadlines, skipped slots, auto-pauses."),
    page.items.length ? eventsTable(page.items, true) : h("p", { class: "muted" }, cursor ? "No older events." : "Nothing has happened yet."),
    h("div", { class: "pager" },
      cursor ? h("a", { href: "#/events" }, "Newest events") : null,
      page.next_cursor ? h("a", { href: `#/events?${new URLSearchParams({ cursor: page.next_cursor })}` }, "Older events") : null));
}

// What a write did and why: the cells a job's revisions and the audit log share.
function writeCells(r) {
  return [h("td", {}, r.action.replaceAll("_", " ")), h("td", {}, r.actor), h("td", {}, r.changed.join(", ") || "–"),
    h("td", {}, r.note || "–")];
}

// A job's revisions (who changed what, when, why), each with a link to what it changed.
function revisionsTable(jobId, items) {
  const heads = ["Revision", "When", "Action", "By", "Changed", "Note", ""];
  return h("table", { class: "revisions" }, h("thead", {}, h("tr", {}, heads.map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, items.map((r) => h("tr", {},
      h("td", {}, r.revision), h("td", {}, when(r.at)), ...writeCells(r),
      h("td", {}, r.revision > 1 && r.action !== "delete"
        ? h("a", { href: `#/jobs/${encodeURIComponent(jobId)}/diff?${new URLSearchParams({ from: r.revision - 1, to: r.revision })}` },
          `What changed in ${r.revision}`)
        : "")))));
}

function shown(value) {
  if (value === null || value === undefined) return "–";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

// Two revisions side by side, field by field, and a rollback to the earlier one (a new revision; its note
// is required).
async function diffView(jobId, params) {
  const live = alive();
  const path = `/jobs/${encodeURIComponent(jobId)}`;
  const from = params.get("from") || "1";
  const to = params.get("to") || "1";
  const diff = (await api("GET", `${path}/diff`, { query: { from, to } })).body;
  const note = h("input", { id: "rollback-note", name: "note", required: true, maxlength: "1000", autocomplete: "off" });
  const rollback = h("form", { onsubmit: async (event) => {
    event.preventDefault();
    try {
      await api("POST", `${path}/rollback`, { body: { revision: Number(from), note: note.value } });
      flash(`Rolled back to revision ${from}.`);
      go(`#/jobs/${encodeURIComponent(jobId)}`);
    } catch (error) { failed(error); }
  } }, h("div", { class: "filters" }, h("label", { for: "rollback-note" }, "Why"), note,
    h("button", { type: "submit" }, `Roll back to revision ${from}`)));
  if (!live()) return;
  view(`Revision ${from} → ${to}`,
    h("p", {}, h("a", { href: `#/jobs/${encodeURIComponent(jobId)}` }, "Back to the job")),
    diff.changes.length
      ? h("table", { class: "diff" },
        h("thead", {}, h("tr", {}, ["Field", `Revision ${from}`, `Revision ${to}`].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, diff.changes.map((c) => h("tr", {}, h("td", {}, c.field),
          h("td", { class: "before" }, shown(c.before)), h("td", { class: "after" }, shown(c.after))))))
      : h("p", { class: "muted" }, "Nothing changed."),
    h("h2", {}, "Roll back"),
    h("p", { class: "muted" }, `Writes revision ${from}'s schedule, target, policies and alerts back as a new revision; the job stays paused or active as it is.`),
    rollback);
}

async function auditView(params) {
  const live = alive();
  const cursor = params.get("cursor") || "";
  const page = (await api("GET", "/audit", { query: { limit: 50, cursor } })).body;
  if (!live()) return;
  const heads = ["When", "Job", "Revision", "Action", "By", "Changed", "Note"];
  view("Audit log",
    h("p", { class: "muted" }, "Every write of your jobs, newest first: who, what, when and why."),
    page.items.length
      ? h("table", { class: "audit" }, h("thead", {}, h("tr", {}, heads.map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, page.items.map((r) => h("tr", {}, h("td", {}, when(r.at)),
          h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(r.job_id)}` }, r.job_id)), h("td", {}, r.revision),
          ...writeCells(r)))))
      : h("p", { class: "muted" }, cursor ? "No older entries." : "Nothing written yet."),
    h("div", { class: "pager" },
      cursor ? h("a", { href: "#/audit" }, "Newest entries") : null,
      page.next_cursor ? h("a", { href: `#/audit?${new URLSearchParams({ cursor: page.next_cursor })}` }, "Older entries") : null));
}

// --- groups and bulk actions -----------------------------------------------------------------------------

function bulkText(a) {
  const p = a.progress;
  return `${a.action} of ${a.group ? `group ${a.group}` : ""}${Object.entries(a.tags).map(([k, v]) => ` ${k}=${v}`).join("")}: ` +
    `${a.state}, ${p.changed} changed, ${p.unchanged} unchanged, ${p.failed} failed (${p.scanned} jobs looked at)`;
}

async function groupsView() {
  const live = alive();
  const [groups, actions] = await Promise.all([api("GET", "/groups"), api("GET", "/bulk-actions")]);
  const note = h("input", { id: "bulk-note", name: "note", maxlength: "1000", autocomplete: "off" });
  const until = h("input", { id: "bulk-until", name: "until", type: "datetime-local", step: "60" });
  const progress = h("p", { id: "bulk-progress", "aria-live": "polite" });
  // One key per click: a retried click after a lost answer is the same action.
  const labels = { pause: "Pause", resume: "Resume", retry_failed: "Retry failed runs of" };
  const start = (action, group) => act(`${labels[action]} ${group}`, async () => {
    if (!note.value.trim()) {
      say(`Say why you ${action} group ${group}: the note goes into every job's revision.`, "error");
      note.focus();
      return false;
    }
    const body = { action, group, note: note.value.trim() };
    if (action === "pause" && until.value) body.resume_at = new Date(until.value).toISOString().replace(".000Z", "Z");
    if (action === "retry_failed") {  // the last 24 hours' failures
      body.to = new Date().toISOString().replace(/\.\d{3}Z$/, "Z");
      body.from = new Date(Date.now() - 24 * 3600 * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
    }
    let answer = (await api("POST", "/bulk-actions", { body, headers: { "Idempotency-Key": crypto.randomUUID() } })).body;
    progress.textContent = bulkText(answer);
    while (answer.state === "running" && live()) {
      await new Promise((resolve) => setTimeout(resolve, 500));
      answer = (await api("GET", `/bulk-actions/${encodeURIComponent(answer.id)}`)).body;
      progress.textContent = bulkText(answer);
    }
    const next = { pause: "Resume", resume: "Pause", retry_failed: "Retry failed runs of" }[action];
    if (live()) await rerender(bulkText(answer), `${next} ${group}`);
  }, action === "resume" ? null : "secondary");
  if (!live()) return;
  view("Groups",
    h("p", { class: "muted" }, "Every job belongs to one group (default unless it names one). Pause or resume a " +
      "whole group in one action, with a note every job's revision keeps; a pause with an end is a maintenance " +
      "window: its jobs resume then, their missed fires following each job's missed-fire policy."),
    h("div", { class: "filters" }, field("bulk-note", "Why (required)", note),
      field("bulk-until", "Maintenance until (optional, your local time)", until)),
    progress,
    groups.body.complete ? null : h("p", { class: "error" },
      `Counted ${groups.body.scanned} of your jobs before the time ran out: these counts are partial.`),
    groups.body.items.length
      ? h("table", { class: "groups" }, h("thead", {}, h("tr", {}, ["Group", "Jobs", "Active", "Paused", "Actions"]
        .map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, groups.body.items.map((g) => h("tr", {},
        h("td", {}, h("a", { href: `#/jobs?${new URLSearchParams({ group: g.name })}` }, g.name)),
        h("td", {}, g.jobs), h("td", {}, g.active), h("td", {}, g.paused),
        h("td", {}, h("span", { class: "actions" }, start("pause", g.name), start("resume", g.name),
          start("retry_failed", g.name)))))))
      : h("p", { class: "muted" }, "No jobs yet."),
    h("h2", {}, "Bulk actions"),
    actions.body.items.length
      ? h("table", { class: "bulk" }, h("thead", {}, h("tr", {}, ["Started", "By", "What", "Note"]
        .map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, actions.body.items.slice(0, 20).map((a) => h("tr", {}, h("td", {}, when(a.created_at)),
        h("td", {}, a.actor), h("td", {}, bulkText(a)), h("td", {}, a.note)))))
      : h("p", { class: "muted" }, "None yet."));
}

// --- exclusion calendars --------------------------------------------------------------------------------

// One line per entry: `2027-12-25 Christmas` (a date) or `2027-11-07T01:00 2027-11-07T02:00 patching` (a window).
function entriesText(calendar) {
  return [...calendar.dates.map((d) => `${d.date} ${d.label}`.trim()),
    ...calendar.windows.map((w) => `${w.start} ${w.end} ${w.label}`.trim())].join("\n");
}

function parsedEntries(text) {
  const dates = [];
  const windows = [];
  for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
    const [first, second, ...rest] = line.split(/\s+/);
    if (second && /^\d{4}-\d\d-\d\dT/.test(second)) windows.push({ start: first, end: second, label: rest.join(" ") });
    else dates.push({ date: first, label: [second, ...rest].filter(Boolean).join(" ") });
  }
  return { dates, windows };
}

async function calendarsView(name) {
  const live = alive();
  const [list, current] = await Promise.all([
    api("GET", "/calendars"),
    name ? api("GET", `/calendars/${encodeURIComponent(name)}`) : Promise.resolve(null),
  ]);
  const calendar = current ? current.body : null;
  const nameInput = h("input", { id: "calendar-name", name: "name", value: name || "", required: true,
    autocomplete: "off", pattern: "[a-z0-9][a-z0-9_\\-]{0,63}", readonly: calendar ? true : null });
  const zone = h("input", { id: "calendar-timezone", name: "timezone", value: calendar ? calendar.timezone : "UTC",
    required: true, autocomplete: "off" });
  const description = h("input", { id: "calendar-description", name: "description",
    value: calendar ? calendar.description : "", autocomplete: "off" });
  const entries = h("textarea", { id: "calendar-entries", name: "entries", rows: "8", cols: "60", spellcheck: "false" },
    calendar ? entriesText(calendar) : "");
  const form = h("form", { onsubmit: async (event) => {
    event.preventDefault();
    const body = { timezone: zone.value.trim(), description: description.value.trim(), ...parsedEntries(entries.value) };
    const target = nameInput.value.trim();
    try {
      await api("PUT", `/calendars/${encodeURIComponent(target)}`, { body,
        headers: { "If-Match": calendar ? current.headers.get("ETag") : '"0"' } });
      flash(`Saved ${target}: its jobs' runs see it at their next claim.`);
      if (name === target) await rerender(`Saved ${target}.`, "Save calendar");
      else go(`#/calendars/${encodeURIComponent(target)}`);
    } catch (error) {
      if (error instanceof ApiError && error.status === 422) {
        say(`422: ${error.fieldErrors().map((e) => `${e.field}: ${e.message}`).join("; ") || error.message}`, "error");
      } else failed(error);
    }
  } },
  h("div", { class: "filters" }, field("calendar-name", "Name", nameInput), field("calendar-timezone", "Time zone", zone),
    field("calendar-description", "Description", description)),
  field("calendar-entries", "Excluded: one per line, a date (2027-12-25 Christmas) or a window of wall-clock times " +
    "(2027-11-07T01:00 2027-11-07T02:00 patching)", entries),
  h("div", { class: "actions" }, h("button", { type: "submit" }, "Save calendar"),
    calendar ? act("Delete calendar", async () => {
      await api("DELETE", `/calendars/${encodeURIComponent(name)}`);
      flash(`Deleted ${name}: jobs that named it run every fire.`);
      go("#/calendars");
    }, "danger") : null));
  if (!live()) return;
  view(calendar ? `Calendar ${calendar.name}` : "Exclusion calendars",
    h("p", { class: "muted" }, "A scheduled fire inside one of a calendar's dates or windows is recorded excluded, " +
      "not run. Jobs read their calendars at each run's claim: an edit counts from the next claim."),
    list.body.items.length
      ? h("table", {}, h("thead", {}, h("tr", {}, ["Name", "Time zone", "Dates", "Windows", "Version", "Description"]
        .map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, list.body.items.map((c) => h("tr", {},
        h("td", {}, h("a", { href: `#/calendars/${encodeURIComponent(c.name)}` }, c.name)), h("td", {}, c.timezone),
        h("td", {}, c.dates.length), h("td", {}, c.windows.length), h("td", {}, c.version), h("td", {}, c.description)))))
      : h("p", { class: "muted" }, "No calendars yet."),
    h("h2", {}, calendar ? `Edit ${calendar.name} (version ${calendar.version})` : "New calendar"),
    calendar ? h("p", {}, h("a", { href: "#/calendars" }, "New calendar")) : null,
    form);
}

async function jobView(jobId) {
  const live = alive();
  const path = `/jobs/${encodeURIComponent(jobId)}`;
  const answer = await api("GET", path);
  const job = answer.body;
  const etag = answer.headers.get("ETag");
  const [preview, runs, events, revisions] = await Promise.all([
    api("GET", `${path}/preview`, { query: { count: 10 } }),
    api("GET", `${path}/runs`, { query: { limit: 50 } }),
    api("GET", "/events", { query: { job_id: jobId, limit: 20 } }),
    api("GET", `${path}/revisions`, { query: { limit: 20 } }),
  ]);
  const fenced = { "If-Match": etag };
  const runKey = crypto.randomUUID();  // one run now per page: a retried click after a lost answer is the same
  // Why: recorded with the write's revision; a pause and a delete need one (a resume may say why too).
  const note = h("input", { id: "action-note", name: "note", maxlength: "1000", autocomplete: "off" });
  const why = (action) => {
    if (note.value.trim() || action === "resume") return note.value.trim() || null;
    say(`Say why you ${action} it: the note goes into the job's revisions.`, "error");
    note.focus();
    return undefined;
  };
  const deleteArea = h("span", { class: "confirm" });
  const askDelete = h("button", { type: "button", class: "danger", onclick: () => {
    deleteArea.replaceChildren(h("span", {}, `Delete ${job.name}? Its history stays until it expires.`),
      act("Yes, delete", async () => {
        const reason = why("delete");
        if (reason === undefined) return false;
        await api("DELETE", path, { headers: fenced, query: { note: reason } });
        flash(`Deleted ${job.name}.`);
        go("#/jobs");
      }, "danger"),
      h("button", { type: "button", class: "secondary", onclick: () => {
        deleteArea.replaceChildren(askDelete);
        askDelete.focus();
      } }, "Cancel"));
    deleteArea.querySelector("button").focus();
  } }, "Delete");
  deleteArea.append(askDelete);
  const actions = h("div", { class: "actions" },
    job.state === "active"
      ? act("Pause", async () => {
        const reason = why("pause");
        if (reason === undefined) return false;
        await api("POST", `${path}/pause`, { headers: fenced, query: { note: reason } });
        await rerender("Paused.", "Resume");
      })
      : act("Resume", async () => {
        await api("POST", `${path}/resume`, { headers: fenced, query: { note: why("resume") } });
        await rerender("Resumed.", "Pause");
      }),
    act("Run now", async () => {
      const run = (await api("POST", `${path}/runs`, { query: job.state === "paused" ? { even_if_paused: "true" } : null,
        headers: { "Idempotency-Key": runKey } })).body;
      await rerender(`Started run ${run.id}.`, "Run now");
    }, "secondary"),
    deleteArea,
    h("span", { class: "why" }, h("label", { for: "action-note" }, "Why"), note));

  let editorValid = true;
  const save = h("button", { type: "submit" }, "Save schedule");
  const editor = scheduleEditor(job.schedule, (ok) => { editorValid = ok; save.disabled = !ok; });
  const editForm = h("form", { onsubmit: async (event) => {
    event.preventDefault();
    if (!editorValid) return;
    try {
      await api("PATCH", path, { body: { schedule: editor.value() }, headers: fenced });
      await rerender("Schedule saved.", "Save schedule");
    } catch (error) { failed(error); }
  } }, h("div", { class: "filters" }, ...editor.fields, save), editor.preview);

  const fires = preview.body.fires.map((f) => h("tr", { class: f.excluded ? "excluded" : null },
    h("td", {}, when(f.at)), h("td", {}, f.local),
    h("td", {}, f.dst ? h("span", { class: "dst" }, f.dst === "shifted" ? "shifted by a DST gap" : "in a repeated DST hour") : ""),
    h("td", {}, f.excluded ? h("span", { class: "excluded" }, f.excluded) : "")));
  // The job's exclusion calendars, replaced whole (an empty field names none).
  const calendarNames = h("input", { id: "job-calendars", name: "calendars", value: job.calendars.join(", "),
    autocomplete: "off", placeholder: "us-holidays, freeze" });
  const calendarsForm = h("form", { onsubmit: async (event) => {
    event.preventDefault();
    const names = calendarNames.value.split(",").map((n) => n.trim()).filter(Boolean);
    try {
      await api("PATCH", path, { body: { calendars: names }, headers: fenced });
      await rerender("Calendars saved.", "Save calendars");
    } catch (error) { failed(error); }
  } }, h("div", { class: "filters" }, field("job-calendars", "Exclusion calendars (comma-separated)", calendarNames),
    h("button", { type: "submit" }, "Save calendars")));
  const unhealthy = events.body.channel_health.filter((c) => !c.healthy);
  const definition = [
    ["State", h("span", { class: `state ${job.state}` }, job.state,
      job.paused_reason ? ` by Tickwork: ${job.paused_reason}` : "")], ["Version", job.version],
    ["Schedule", `${job.schedule.expression} · ${job.schedule.timezone} — ${job.schedule.description}`],
    ["Next fire", when(job.next_fire_at)], ["Target", `${job.target.kind} ${JSON.stringify(job.target.config)}`],
    ["Policies", `overlap ${job.policies.overlap}, missed fires ${job.policies.missed_fire}, ` +
      `${job.policies.retry.max_attempts} attempts`], ["Timeout", `${job.timeout_seconds} s`],
    ["Runs end by", completionText(job)],
    ["Concurrency", job.policies.concurrency
      ? `at most ${job.policies.concurrency.limit} at once of key ${job.policies.concurrency.key}` : "–"],
    ["Tags", Object.entries(job.tags).map(([k, v]) => `${k}=${v}`).join(", ") || "–"],
    ["Group", h("a", { href: `#/jobs?${new URLSearchParams({ group: job.group })}` }, job.group)],
    ["Calendars", job.calendars.length
      ? job.calendars.map((c, i) => [i ? ", " : "", h("a", { href: `#/calendars/${encodeURIComponent(c)}` }, c)])
      : "–"],
    ["Alerts", alertsText(job.alerts)],
    ...unhealthy.map((c) => ["Unhealthy channel", h("span", { class: "unhealthy" },
      `${c.channel} since ${when(c.since)}: ${c.detail}`)]),
  ];
  const runsArea = h("section", { "aria-labelledby": "runs-heading" });
  if (!live()) return;
  view(job.name, actions,
    h("dl", { class: "def" }, definition.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    h("h2", {}, "Edit the schedule"), editForm,
    h("h2", {}, "Exclusion calendars"), calendarsForm,
    h("h2", {}, "Next 10 fires"),
    h("table", { class: "fires" }, h("thead", {}, h("tr", {}, ["UTC", `Local (${job.schedule.timezone})`, "DST", "Excluded"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, fires)),
    h("h2", { id: "events-heading" }, "Events"),
    events.body.items.length ? eventsTable(events.body.items, false) : h("p", { class: "muted" }, "Nothing to tell yet."),
    h("h2", { id: "revisions-heading" }, "Revisions"),
    revisionsTable(jobId, revisions.body.items),
    runsArea);
  showRuns(jobId, runsArea, runs.body.items);
}

// The job's runs and their chart. Runs in progress move on by themselves: while any is unfinished, the
// section (only it: a schedule being edited stays as typed) is read again every 2 s.
function showRuns(jobId, area, items) {
  const history = items.map((r) => h("tr", {},
    h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(jobId)}/runs/${encodeURIComponent(r.id)}` }, when(r.timings.scheduled_for))),
    h("td", {}, runState(r)),
    h("td", {}, r.trigger), h("td", {}, r.attempt), h("td", {}, when(r.timings.started_at)),
    h("td", {}, ms(r.timings.start_delay_ms)),
    h("td", {}, (r.state === "excluded" ? r.reason : r.outcome || r.reason) || "")));
  area.replaceChildren(
    h("h2", {}, "Start delay and duration"), chart(items),
    h("h2", { id: "runs-heading" }, "Runs"),
    history.length
      ? h("table", { id: "runs" }, h("thead", {}, h("tr", {}, ["Scheduled for", "State", "Trigger", "Attempts", "Started", "Start delay", "Outcome"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, history))
      : h("p", { class: "muted" }, "No runs yet."));
  // Planned runs of an active job are always there (the ticker plans ahead): only those due soon count.
  const moving = (r) => ["queued", "running", "retry_wait"].includes(r.state)
    || (r.state === "planned" && new Date(r.timings.due_at) - Date.now() < 60000);
  if (items.some(moving)) pollRuns(jobId, area, 2000);
}

function pollRuns(jobId, area, delay) {
  later(async () => {
    if (!area.isConnected) return;
    try {
      const again = await api("GET", `/jobs/${encodeURIComponent(jobId)}/runs`, { query: { limit: 50 } });
      if (area.isConnected) showRuns(jobId, area, again.body.items);
    } catch (error) {
      failed(error);
      pollRuns(jobId, area, Math.min(delay * 2, 30000));  // keep following, less often
    }
  }, delay);
}

async function runView(jobId, runId) {
  const live = alive();
  const path = `/jobs/${encodeURIComponent(jobId)}/runs/${encodeURIComponent(runId)}`;
  const run = (await api("GET", path)).body;
  const t = run.timings;
  const callback = run.completion === "callback";
  const steps = [
    h("li", {}, h("strong", {}, "planned "), when(t.planned_at), ` for ${when(t.scheduled_for)} (due ${when(t.due_at)})`),
    ...run.attempts.map((a) => h("li", { class: a.ok ? "ok" : "failed" },
      h("strong", {}, `attempt ${a.attempt} `),
      a.ok ? (run.completion === "delivery" ? "delivered" : "succeeded") : (a.status === "Excluded" ? "excluded, not called" : "failed"),
      ` at ${when(a.finished_at)}`,
      h("div", { class: "muted" }, `worker ${a.worker || "–"} · status ${a.status} · ${ms(a.latency_ms)}`),
      a.detail ? h("div", {}, a.detail) : null)),
  ];
  if (run.lease) {
    steps.push(h("li", {}, h("strong", {}, "running "), `held by ${run.lease.owner} until ${when(run.lease.expires_at)}`,
      callback ? h("div", { class: "muted" }, run.heartbeat_at
        ? `last heartbeat ${when(run.heartbeat_at)}: each one moves the lease` : "no heartbeat yet") : null));
  }
  if (run.retry_at) steps.push(h("li", {}, h("strong", {}, "next attempt "), when(run.retry_at)));
  const retryKey = crypto.randomUUID();
  const retry = ["failed", "cancelled"].includes(run.state)
    ? act("Retry", async () => {
      await api("POST", `${path}/retry`, { headers: { "Idempotency-Key": retryKey } });
      await rerender("Retry started.", "Back to the job");
    }) : null;
  if (!live()) return;
  view(`Run ${run.id}`,
    h("p", {}, h("a", { href: `#/jobs/${encodeURIComponent(jobId)}` }, "Back to the job")),
    h("dl", { class: "def" },
      [["State", runState(run)], ["Ends by", COMPLETION_WORDS[run.completion] || run.completion || "–"],
        ["Trigger", run.trigger], ["Attempts", run.attempt], ["Start delay", ms(t.start_delay_ms)],
        ["Lease", run.lease ? `held by ${run.lease.owner} until ${when(run.lease.expires_at)}` : "–"],
        ["Last heartbeat", when(run.heartbeat_at)],
        ["Outcome", run.outcome || "–"], ["Reason", run.reason || "–"]].map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    h("div", { class: "actions" }, retry),
    h("h2", {}, "Timeline"), h("ol", { class: "timeline" }, steps));
  if (!TERMINAL.includes(run.state)) later(() => render(true), 2000);
}

async function failedView(params) {
  const live = alive();
  const since = params.get("from") || new Date(Date.now() - 24 * 3600 * 1000).toISOString();
  const cursor = params.get("cursor") || "";
  const page = (await api("GET", "/runs", { query: { state: "failed", from: since, limit: 100, cursor } })).body;
  const older = new URLSearchParams({ from: since, cursor: page.next_cursor || "" });
  if (!live()) return;
  view("Failed runs (last 24 hours)",
    page.items.length
      ? h("table", {}, h("thead", {}, h("tr", {}, ["Run", "Failed at", "Attempts", "Reason"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, page.items.map((r) => h("tr", {},
          h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(r.job_id)}/runs/${encodeURIComponent(r.id)}` }, r.id)),
          h("td", {}, when(r.timings.finished_at)), h("td", {}, r.attempt), h("td", {}, r.reason || r.outcome || "")))))
      : h("p", { class: "muted" }, cursor ? "No older failures." : "Nothing failed in the last 24 hours."),
    h("div", { class: "pager" },
      cursor ? h("a", { href: "#/failed" }, "Newest failures") : null,
      page.next_cursor ? h("a", { href: `#/failed?${older}` }, "Older failures") : null));
}

async function healthView() {
  const live = alive();
  if (!state.config.local) {
    view("Health",
      h("p", {}, "In AWS the scheduler's health is on its CloudWatch dashboard: runs by state, start delay, queue depth, alarms."),
      state.config.dashboard_url ? h("p", {}, h("a", { href: state.config.dashboard_url }, "Open the dashboard")) : null);
    return;
  }
  let health;
  try {
    health = (await api("GET", "/ui/health.json")).body;
  } catch (error) {
    if (error instanceof ApiError && error.status === 503 && live()) {
      view("Health", h("p", { class: "muted" }, "Waiting for the runtime's first status…"));
      later(() => render(true), 2000);
      return;
    }
    if (error instanceof ApiError && error.status === 403 && live()) {
      view("Health", h("p", {}, error.message));
      return;
    }
    throw error;
  }
  const card = (label, value, note) => h("div", { class: "card" }, h("div", { class: "muted" }, label),
    h("div", { class: "metric" }, value), note ? h("div", { class: "muted" }, note) : null);
  const perMinute = health.per_minute;
  if (!live()) return;
  view("Health",
    h("div", { class: "grid" },
      card("Runs in flight", `${health.running} / ${health.cap}`, "against the concurrency cap"),
      card("Succeeded a minute", perMinute.succeeded),
      card("Failed a minute", perMinute.failed),
      card("Retries a minute", perMinute.retries),
      card("Planned a minute", perMinute.planned),
      card("Queue depth", health.queue_depth, "messages waiting or delayed"),
      card("Start delay p50", ms(health.start_delay_p50_ms), "last minute"),
      card("Start delay p99", ms(health.start_delay_p99_ms), "last minute"),
      card("Jobs", health.jobs)),
    h("p", { class: "muted" }, `Measured by the local runtime over the last ${Math.round(health.window_seconds)} s, at ${when(new Date(health.at * 1000))}.`));
  later(() => render(true), 3000);
}

// --- routing -------------------------------------------------------------------------------------------

// A button for an API action: disabled while it runs (no double submit), enabled again if it failed.
function act(label, action, className) {
  return h("button", { type: "button", class: className, onclick: async (event) => {
    event.target.disabled = true;
    // An action that answers false did nothing (it asked for more first): its button is ready again.
    try { if (await action() === false) event.target.disabled = false; } catch (error) { failed(error); event.target.disabled = false; }
  } }, label);
}

// Re-render the current page after an action, say what happened, and put focus back on `focusText`'s
// button or link (the one acted on, or its counterpart: Pause becomes Resume).
async function rerender(message, focusText) {
  await render(true);
  say(message);
  const target = [...document.querySelectorAll("main button, main a")].find((e) => e.textContent.trim() === focusText);
  if (target) target.focus();
}

async function render(quiet) {
  const gen = ++state.gen;
  state.timers.forEach(clearTimeout);
  state.timers = [];
  const shown = state.flash;
  state.flash = null;
  if (!quiet || shown) say(shown ? shown.message : "", shown ? shown.kind : "ok");
  // A live update keeps the keyboard where it was: the element with the same id, or the same control text.
  const before = document.activeElement;
  const kept = quiet && before && before !== document.body
    ? { id: before.id, tag: before.tagName, text: before.textContent.trim() } : null;
  let landing = null;
  try {
    if (!state.config) state.config = (await api("GET", "/ui/config.json")).body;
    if (gen !== state.gen) return;
    const [route, query] = (location.hash.slice(1) || "/jobs").split("?");
    const params = new URLSearchParams(query || "");
    let parts;
    try {
      parts = route.split("/").filter(Boolean).map(decodeURIComponent);
    } catch {
      parts = ["not-found"];  // a malformed address
    }
    const signedIn = Boolean(state.token) && state.config.auth !== "iam";
    document.getElementById("sign-out").hidden = !signedIn;
    document.getElementById("live").hidden = !signedIn;
    document.querySelectorAll("nav a").forEach((a) => {
      if (a.dataset.section === (parts[0] === "new" ? "jobs" : parts[0])) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    });
    landing = signedIn ? parts[0] : "signin";
    if (!signedIn) signInView();
    else if (parts[0] === "jobs" && parts.length === 1) await jobsView(params);
    else if (parts[0] === "jobs" && parts.length === 2) await jobView(parts[1]);
    else if (parts[0] === "jobs" && parts[2] === "runs" && parts.length === 4) await runView(parts[1], parts[3]);
    else if (parts[0] === "jobs" && parts[2] === "diff" && parts.length === 3) await diffView(parts[1], params);
    else if (parts[0] === "new") newJobView();
    else if (parts[0] === "failed") await failedView(params);
    else if (parts[0] === "events") await eventsView(params);
    else if (parts[0] === "audit") await auditView(params);
    else if (parts[0] === "calendars" && parts.length <= 2) await calendarsView(parts[1]);
    else if (parts[0] === "groups") await groupsView();
    else if (parts[0] === "health") await healthView();
    else if (parts[0] === "signin") { go("#/jobs"); return; }
    else view("Not found", h("p", {}, "No such page. ", h("a", { href: "#/jobs" }, "Your jobs")));
  } catch (error) {
    if (gen !== state.gen) return;
    if (error instanceof ApiError && error.status === 404) {
      view("Not found", h("p", {}, error.message), h("p", {}, h("a", { href: "#/jobs" }, "Your jobs")));
    } else {
      failed(error);
    }
  }
  if (gen !== state.gen) return;
  if (kept) {
    const again = (kept.id && document.getElementById(kept.id))
      || [...document.querySelectorAll(kept.tag)].find((e) => e.textContent.trim() === kept.text);
    if (again) again.focus({ preventScroll: true });
  } else if (!quiet) {
    // A form page starts in its first field; any other page at its content (after the navigation).
    const first = ["new", "signin"].includes(landing) ? document.querySelector("main input") : null;
    (first || document.getElementById("main")).focus({ preventScroll: true });
  }
}

window.addEventListener("hashchange", () => render());
window.addEventListener("DOMContentLoaded", () => {
  document.getElementById("sign-out").addEventListener("click", () => signOut("Signed out."));
  // The skip link moves focus to the content; it must not go through the router (#main is no page).
  document.querySelector(".skip").addEventListener("click", (event) => {
    event.preventDefault();
    document.getElementById("main").focus();
  });
  const liveButton = document.getElementById("live");
  liveButton.addEventListener("click", () => {
    state.paused = !state.paused;
    liveButton.setAttribute("aria-pressed", String(state.paused));
    liveButton.textContent = state.paused ? "Resume live updates" : "Pause live updates";
    if (!state.paused) render(true);
  });
  render();
});
