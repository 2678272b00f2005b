// Tickwork console: one page over the same API as every other client, with the caller's token.
// No framework and no build step: the DOM is built with `h` (text is never parsed as HTML).
"use strict";

const TOKEN_KEY = "tickwork-token";
const state = { config: null, token: sessionStorage.getItem(TOKEN_KEY), pages: {}, timers: [] };

// --- small helpers -------------------------------------------------------------------------------------

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

function say(message, kind = "ok") {
  const status = document.getElementById("status");
  status.replaceChildren(message ? h("span", { class: kind }, message) : "");
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
    super(problem.detail || problem.title || `HTTP ${status}`);
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
  const parsed = text ? JSON.parse(text) : null;
  if (!response.ok) throw new ApiError(response.status, parsed || { title: response.statusText });
  return { status: response.status, headers: response.headers, body: parsed };
}

function failed(error) {
  if (error instanceof ApiError && error.status === 401) {
    signOut("Your token was not accepted: sign in again.");
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

function signOut(message) {
  state.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  location.hash = "#/signin";
  render().then(() => message && say(message, "error"));
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
      say("Signed in.");
      // Straight on to the page the address asked for (a shared link), or the jobs.
      const next = location.hash && location.hash !== "#/signin" ? location.hash : "#/jobs";
      if (location.hash === next) await render(true);
      else location.hash = next;
    } catch (error) {
      state.token = null;
      say(error instanceof ApiError && error.status === 401 ? "That token was not accepted." : String(error), "error");
    }
  } }, h("label", { for: "token" }, "API token", input), h("button", { type: "submit" }, "Sign in"));
  view("Sign in", h("p", { class: "muted" }, hint), form);
  input.focus();
}

// --- jobs ----------------------------------------------------------------------------------------------

function runMarks(runs) {
  return h("span", { class: "marks", role: "img",
    "aria-label": runs.length ? `last runs: ${runs.map((r) => r.state).join(", ")}` : "no runs yet" },
    runs.slice(0, 8).reverse().map((r) => h("span", { class: `mark ${r.state}`, title: `${r.state} ${when(r.timings.scheduled_for)}` })));
}

function successRate(runs) {
  const done = runs.filter((r) => ["succeeded", "failed"].includes(r.state));
  if (!done.length) return "–";
  const ok = done.filter((r) => r.state === "succeeded").length;
  return `${Math.round((100 * ok) / done.length)} % of ${done.length}`;
}

async function jobsView(params) {
  const filters = { state: params.get("state") || "", tag: params.get("tag") || "", name: params.get("name") || "" };
  const cursor = params.get("cursor") || "";
  const page = (await api("GET", "/jobs", { query: { limit: 20, cursor, ...filters } })).body;
  const rows = await Promise.all(page.items.map(async (job) => {
    const runs = (await api("GET", `/jobs/${encodeURIComponent(job.id)}/runs`, { query: { limit: 10 } })).body.items;
    return h("tr", {},
      h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, job.name)),
      h("td", {}, job.schedule.description, h("div", { class: "muted" }, `${job.schedule.expression} · ${job.schedule.timezone}`)),
      h("td", {}, h("span", { class: `state ${job.state}` }, job.state)),
      h("td", {}, when(job.next_fire_at)),
      h("td", {}, runMarks(runs)),
      h("td", {}, successRate(runs)));
  }));
  const field = (name, label, input) => h("label", { for: `filter-${name}` }, label, input);
  const stateSelect = h("select", { id: "filter-state", name: "state" },
    ["", "active", "paused"].map((v) => h("option", { value: v, selected: v === filters.state }, v || "any")));
  const nameInput = h("input", { id: "filter-name", name: "name", type: "search", value: filters.name });
  const tagInput = h("input", { id: "filter-tag", name: "tag", placeholder: "key=value", value: filters.tag });
  const filterForm = h("form", { class: "filters", role: "search", onsubmit: (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    if (stateSelect.value) next.set("state", stateSelect.value);
    if (nameInput.value.trim()) next.set("name", nameInput.value.trim());
    if (tagInput.value.trim()) next.set("tag", tagInput.value.trim());
    location.hash = `#/jobs?${next}`;
  } }, field("name", "Name contains", nameInput), field("state", "State", stateSelect), field("tag", "Tag", tagInput),
  h("button", { type: "submit" }, "Filter"));
  const history = state.pages[JSON.stringify(filters)] || [];
  const pager = h("div", { class: "pager" },
    cursor ? h("button", { type: "button", class: "secondary", onclick: () => {
      history.pop();
      const previous = new URLSearchParams(params);
      const back = history[history.length - 1];
      if (back) previous.set("cursor", back); else previous.delete("cursor");
      location.hash = `#/jobs?${previous}`;
    } }, "Previous page") : null,
    page.next_cursor ? h("button", { type: "button", class: "secondary", onclick: () => {
      history.push(page.next_cursor);
      state.pages[JSON.stringify(filters)] = history;
      const next = new URLSearchParams(params);
      next.set("cursor", page.next_cursor);
      location.hash = `#/jobs?${next}`;
    } }, "Next page") : null);
  view("Jobs",
    h("div", { class: "actions" }, h("a", { class: "button", href: "#/new" }, "New job")),
    filterForm,
    page.items.length
      ? h("table", {}, h("caption", { class: "visually-hidden" }, "Your jobs"),
        h("thead", {}, h("tr", {}, ["Name", "Schedule", "State", "Next fire (UTC)", "Last runs", "Success"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, rows))
      : h("p", { class: "muted" }, "No jobs here yet."),
    pager);
}

// The schedule editor, shared by "new job" and "edit schedule": every change is checked by
// /schedules/preview as the user types, and its errors are shown at the field they are about.
function scheduleEditor(initial, onValid) {
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
        body: { expression: expression.value.trim(), timezone: timezone.value.trim(), count: 5 } })).body;
      if (asked !== latest) return;
      preview.replaceChildren(h("p", { class: "muted" }, result.description),
        h("ol", {}, result.fires.map((f) => h("li", {}, `${when(f.at)} (${f.local})`, f.dst ? h("span", { class: "dst" }, ` ${f.dst}`) : null))));
      onValid(true);
    } catch (error) {
      if (asked !== latest) return;
      onValid(false);
      preview.replaceChildren();
      if (!(error instanceof ApiError)) { failed(error); return; }
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
      h("label", { for: "expression" }, "Cron expression", expression, expressionError),
      h("label", { for: "timezone" }, "Time zone", timezone, timezoneError),
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
  const form = h("form", { onsubmit: async (event) => {
    event.preventDefault();
    if (!valid) return;
    try {
      const job = (await api("POST", "/jobs", { body: {
        name: name.value.trim(), schedule: editor.value(),
        target: { kind: "http", config: { url: url.value.trim(), method: "POST" } } },
        headers: { "Idempotency-Key": crypto.randomUUID() } })).body;
      say(`Created ${job.name}.`);
      location.hash = `#/jobs/${encodeURIComponent(job.id)}`;
    } catch (error) { failed(error); }
  } },
  h("div", { class: "filters" }, h("label", { for: "name" }, "Name", name), ...editor.fields,
    h("label", { for: "url" }, "Target URL (HTTP POST)", url)),
  h("h2", {}, "Next fires"), editor.preview, submit);
  view("New job", form);
  name.focus();
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

async function jobView(jobId) {
  const path = `/jobs/${encodeURIComponent(jobId)}`;
  const answer = await api("GET", path);
  const job = answer.body;
  const etag = answer.headers.get("ETag");
  const [preview, runs] = await Promise.all([
    api("GET", `${path}/preview`, { query: { count: 10 } }),
    api("GET", `${path}/runs`, { query: { limit: 50 } }),
  ]);
  const act = (label, action, className) => h("button", { type: "button", class: className, onclick: async (event) => {
    event.target.disabled = true;
    try { await action(); } catch (error) { failed(error); event.target.disabled = false; }
  } }, label);
  const fenced = { "If-Match": etag };
  const deleteArea = h("span", { class: "confirm" });
  const askDelete = h("button", { type: "button", class: "danger", onclick: () => {
    deleteArea.replaceChildren(h("span", {}, `Delete ${job.name}? Its history stays until it expires.`),
      act("Yes, delete", async () => {
        await api("DELETE", path, { headers: fenced });
        say(`Deleted ${job.name}.`);
        location.hash = "#/jobs";
      }, "danger"),
      h("button", { type: "button", class: "secondary", onclick: () => deleteArea.replaceChildren(askDelete) }, "Cancel"));
    deleteArea.querySelector("button").focus();
  } }, "Delete");
  deleteArea.append(askDelete);
  const actions = h("div", { class: "actions" },
    job.state === "active"
      ? act("Pause", async () => { await api("POST", `${path}/pause`, { headers: fenced }); await render(true); say("Paused."); })
      : act("Resume", async () => { await api("POST", `${path}/resume`, { headers: fenced }); await render(true); say("Resumed."); }),
    act("Run now", async () => {
      const run = (await api("POST", `${path}/runs`, { query: job.state === "paused" ? { even_if_paused: "true" } : null,
        headers: { "Idempotency-Key": crypto.randomUUID() } })).body;
      await render(true);
      say(`Started run ${run.id}.`);
    }, "secondary"),
    deleteArea);

  let editorValid = true;
  const save = h("button", { type: "submit" }, "Save schedule");
  const editor = scheduleEditor(job.schedule, (ok) => { editorValid = ok; save.disabled = !ok; });
  const editForm = h("form", { onsubmit: async (event) => {
    event.preventDefault();
    if (!editorValid) return;
    try {
      await api("PATCH", path, { body: { schedule: editor.value() }, headers: fenced });
      await render(true);
      say("Schedule saved.");
    } catch (error) { failed(error); }
  } }, h("div", { class: "filters" }, ...editor.fields, save), editor.preview);

  const fires = preview.body.fires.map((f) => h("tr", {}, h("td", {}, when(f.at)), h("td", {}, f.local),
    h("td", {}, f.dst ? h("span", { class: "dst" }, f.dst === "shifted" ? "shifted by a DST gap" : "in a repeated DST hour") : "")));
  const definition = [
    ["State", h("span", { class: `state ${job.state}` }, job.state)], ["Version", job.version],
    ["Schedule", `${job.schedule.expression} · ${job.schedule.timezone} — ${job.schedule.description}`],
    ["Next fire", when(job.next_fire_at)], ["Target", `${job.target.kind} ${JSON.stringify(job.target.config)}`],
    ["Policies", `overlap ${job.policies.overlap}, missed fires ${job.policies.missed_fire}, ` +
      `${job.policies.retry.max_attempts} attempts`], ["Timeout", `${job.timeout_seconds} s`],
    ["Tags", Object.entries(job.tags).map(([k, v]) => `${k}=${v}`).join(", ") || "–"],
  ];
  const runsArea = h("section", { "aria-labelledby": "runs-heading" });
  view(job.name, actions,
    h("dl", { class: "def" }, definition.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    h("h2", {}, "Edit the schedule"), editForm,
    h("h2", {}, "Next 10 fires"),
    h("table", {}, h("thead", {}, h("tr", {}, ["UTC", `Local (${job.schedule.timezone})`, "DST"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, fires)),
    runsArea);
  showRuns(jobId, runsArea, runs.body.items);
}

// The job's runs and their chart. Runs in progress move on by themselves: while any is unfinished, the
// section (only it: a schedule being edited stays as typed) is read again every 2 s.
function showRuns(jobId, area, items) {
  const history = items.map((r) => h("tr", {},
    h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(jobId)}/runs/${encodeURIComponent(r.id)}` }, when(r.timings.scheduled_for))),
    h("td", {}, h("span", { class: `state ${r.state}` }, r.state)),
    h("td", {}, r.trigger), h("td", {}, r.attempt), h("td", {}, when(r.timings.started_at)),
    h("td", {}, ms(r.timings.start_delay_ms)), h("td", {}, r.outcome || r.reason || "")));
  area.replaceChildren(
    h("h2", {}, "Start delay and duration"), chart(items),
    h("h2", { id: "runs-heading" }, "Runs"),
    history.length
      ? h("table", { id: "runs" }, h("thead", {}, h("tr", {}, ["Scheduled for", "State", "Trigger", "Attempts", "Started", "Start delay", "Outcome"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, history))
      : h("p", { class: "muted" }, "No runs yet."));
  if (items.some((r) => ["planned", "queued", "running", "retry_wait"].includes(r.state))) {
    state.timers.push(setTimeout(async () => {
      if (!area.isConnected) return;
      try {
        const again = await api("GET", `/jobs/${encodeURIComponent(jobId)}/runs`, { query: { limit: 50 } });
        if (area.isConnected) showRuns(jobId, area, again.body.items);
      } catch (error) { failed(error); }
    }, 2000));
  }
}

async function runView(jobId, runId) {
  const path = `/jobs/${encodeURIComponent(jobId)}/runs/${encodeURIComponent(runId)}`;
  const run = (await api("GET", path)).body;
  const t = run.timings;
  const steps = [
    h("li", {}, h("strong", {}, "planned "), when(t.planned_at), ` for ${when(t.scheduled_for)} (due ${when(t.due_at)})`),
    ...run.attempts.map((a) => h("li", { class: a.ok ? "ok" : "failed" },
      h("strong", {}, `attempt ${a.attempt} `), a.ok ? "succeeded" : "failed", ` at ${when(a.finished_at)}`,
      h("div", { class: "muted" }, `worker ${a.worker || "–"} · status ${a.status} · ${ms(a.latency_ms)}`),
      a.detail ? h("div", {}, a.detail) : null)),
  ];
  if (run.lease) steps.push(h("li", {}, h("strong", {}, "running "), `held by ${run.lease.owner} until ${when(run.lease.expires_at)}`));
  if (run.retry_at) steps.push(h("li", {}, h("strong", {}, "next attempt "), when(run.retry_at)));
  const retry = ["failed", "cancelled"].includes(run.state)
    ? h("button", { type: "button", onclick: async (event) => {
      event.target.disabled = true;
      try {
        await api("POST", `${path}/retry`, { headers: { "Idempotency-Key": crypto.randomUUID() } });
        await render(true);
        say("Retry started.");
      } catch (error) { failed(error); event.target.disabled = false; }
    } }, "Retry") : null;
  view(`Run ${run.id}`,
    h("p", {}, h("a", { href: `#/jobs/${encodeURIComponent(jobId)}` }, "Back to the job")),
    h("dl", { class: "def" },
      [["State", h("span", { class: `state ${run.state}` }, run.state)], ["Trigger", run.trigger],
        ["Attempts", run.attempt], ["Start delay", ms(t.start_delay_ms)], ["Outcome", run.outcome || "–"],
        ["Reason", run.reason || "–"]].map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    h("div", { class: "actions" }, retry),
    h("h2", {}, "Timeline"), h("ol", { class: "timeline" }, steps));
  if (!["succeeded", "failed", "skipped", "missed", "cancelled"].includes(run.state)) {
    state.timers.push(setTimeout(() => render(true), 2000));
  }
}

async function failedView() {
  const since = new Date(Date.now() - 24 * 3600 * 1000).toISOString();
  const page = (await api("GET", "/runs", { query: { state: "failed", from: since, limit: 100 } })).body;
  view("Failed runs (last 24 hours)",
    page.items.length
      ? h("table", {}, h("thead", {}, h("tr", {}, ["Run", "Failed at", "Attempts", "Reason"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, page.items.map((r) => h("tr", {},
          h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(r.job_id)}/runs/${encodeURIComponent(r.id)}` }, r.id)),
          h("td", {}, when(r.timings.finished_at)), h("td", {}, r.attempt), h("td", {}, r.reason || r.outcome || "")))))
      : h("p", { class: "muted" }, "Nothing failed in the last 24 hours."));
}

async function healthView() {
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
    if (error instanceof ApiError && error.status === 503) {
      view("Health", h("p", { class: "muted" }, "Waiting for the runtime's first status…"));
      state.timers.push(setTimeout(() => render(true), 2000));
      return;
    }
    throw error;
  }
  const card = (label, value, note) => h("div", { class: "card" }, h("div", { class: "muted" }, label),
    h("div", { class: "metric" }, value), note ? h("div", { class: "muted" }, note) : null);
  const perMinute = health.per_minute;
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
  state.timers.push(setTimeout(() => render(true), 3000));
}

// --- routing -------------------------------------------------------------------------------------------

async function render(quiet) {
  state.timers.forEach(clearTimeout);
  state.timers = [];
  if (!quiet) say("");
  if (!state.config) state.config = (await api("GET", "/ui/config.json")).body;
  const [route, query] = (location.hash.slice(1) || "/jobs").split("?");
  const params = new URLSearchParams(query || "");
  const parts = route.split("/").filter(Boolean).map(decodeURIComponent);
  const signedIn = Boolean(state.token) && state.config.auth !== "iam";
  document.getElementById("sign-out").hidden = !signedIn;
  document.querySelectorAll("nav a").forEach((a) => {
    if (a.dataset.section === (parts[0] === "new" ? "jobs" : parts[0])) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  });
  if (!signedIn) { signInView(); return; }
  try {
    if (parts[0] === "jobs" && parts.length === 1) await jobsView(params);
    else if (parts[0] === "jobs" && parts.length === 2) await jobView(parts[1]);
    else if (parts[0] === "jobs" && parts[2] === "runs" && parts.length === 4) await runView(parts[1], parts[3]);
    else if (parts[0] === "new") newJobView();
    else if (parts[0] === "failed") await failedView();
    else if (parts[0] === "health") await healthView();
    else if (parts[0] === "signin") { location.hash = "#/jobs"; return; }
    else view("Not found", h("p", {}, "No such page. ", h("a", { href: "#/jobs" }, "Your jobs")));
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) {
      view("Not found", h("p", {}, error.message), h("p", {}, h("a", { href: "#/jobs" }, "Your jobs")));
    } else {
      failed(error);
    }
  }
  if (!quiet) document.getElementById("main").focus({ preventScroll: true });
}

window.addEventListener("hashchange", () => render());
window.addEventListener("DOMContentLoaded", () => {
  document.getElementById("sign-out").addEventListener("click", () => signOut("Signed out."));
  render();
});
