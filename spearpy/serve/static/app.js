// The live view of spearpy serve: plain DOM, no build step, no CDN.
// Everything a guest or a model wrote is set with textContent, never as HTML.
"use strict";

const TOKEN_KEY = "spearpy-serve-token";
const $ = (id) => document.getElementById(id);

// ---- token and API --------------------------------------------------------

(function takeTokenFromUrl() {
  const url = new URL(location.href);
  const token = url.searchParams.get("token");
  if (token) {
    sessionStorage.setItem(TOKEN_KEY, token);
    url.searchParams.delete("token"); // keep it out of history and screenshots
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
})();

function token() { return sessionStorage.getItem(TOKEN_KEY); }

async function api(path, options = {}) {
  const headers = Object.assign({ Accept: "application/json" }, options.headers || {});
  if (token()) headers.Authorization = "Bearer " + token();
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (response.status === 401) {
    $("token-form").hidden = false;
    setServiceState("token needed", "bad");
  }
  let body = null;
  try { body = await response.json(); } catch (_) { body = null; }
  if (!response.ok) {
    const err = new Error((body && body.detail) || response.statusText);
    err.status = response.status;
    throw err;
  }
  return body;
}

function setServiceState(text, kind) {
  const chip = $("service-state");
  chip.textContent = text;
  chip.className = "chip " + (kind || "");
}

$("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
  $("token-form").hidden = true;
  refreshRuns();
  loadModules();
  route();
});

// ---- small DOM helpers ----------------------------------------------------

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function pretty(text) {
  if (typeof text !== "string") return "";
  let value;
  try { value = JSON.parse(text); } catch (_) { return text; }
  const compact = JSON.stringify(value);
  return compact.length <= 72 ? compact : JSON.stringify(value, null, 2);
}

function limitText(name, value) {
  if (name === "timeout" || name === "tool_timeout") return `${name} ${value} s`;
  if (name.endsWith("_bytes") || name === "max_memory") {
    const units = ["B", "KiB", "MiB", "GiB"];
    let v = value, i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
    return `${name} ${Number.isInteger(v) ? v : v.toFixed(1)} ${units[i]}`;
  }
  return `${name} ${value}`;
}

function ms(value) {
  if (value === null || value === undefined) return "–";
  return value < 1000 ? value.toFixed(value < 10 ? 2 : 0) + " ms" : (value / 1000).toFixed(2) + " s";
}

// "resumed": going on from its journal after the service restarted.
function inProgress(run) {
  return run.status === "running" || run.status === "resumed";
}

function statusLabel(run) {
  if (inProgress(run)) return run.cancel_requested ? "cancelling" : run.status;
  if (run.status === "interrupted") return "interrupted";
  return run.outcome === "exited" ? "exited " + run.exit_code : run.outcome;
}

function pillClass(run) {
  if (inProgress(run)) return "pill running";
  if (run.outcome === "exited" && run.exit_code === 0) return "pill ok";
  if (run.outcome === "exited") return "pill warn";
  return "pill bad";
}

function setBar(id, value, max) {
  const bar = $(id);
  bar.style.width = max ? Math.min(100, (100 * value) / max).toFixed(1) + "%" : "0";
  bar.parentElement.hidden = !max;
}

// ---- run list -------------------------------------------------------------

let currentRunId = null;

async function refreshRuns() {
  let body;
  try { body = await api("/v1/runs?limit=100"); } catch (_) { return; }
  setServiceState("ready", "ok");
  const list = $("run-list");
  list.replaceChildren();
  if (!body.runs.length) list.append(el("li", "muted", "No runs yet"));
  for (const run of body.runs) {
    const item = el("li", run.id === currentRunId ? "active" : "");
    const link = el("a");
    link.href = "#/runs/" + run.id;
    link.dataset.runId = run.id;
    const top = el("div", "run-row");
    top.append(el("span", "run-module", run.module), el("span", pillClass(run), statusLabel(run)));
    link.append(top, el("div", "muted small", new Date(run.created_at * 1000).toLocaleTimeString() + " · " + run.id.slice(0, 8)));
    item.append(link);
    list.append(item);
  }
}

// ---- new-run form ---------------------------------------------------------

let modules = [];

async function loadModules() {
  let body;
  try { body = await api("/v1/modules"); } catch (_) { return; }
  modules = body.modules;
  const select = $("f-module");
  select.replaceChildren();
  for (const m of modules) {
    const option = el("option", "", m.name + (m.runnable ? "" : " (not runnable)"));
    option.value = m.name;
    option.disabled = !m.runnable;
    select.append(option);
  }
  describeModule();
}

function describeModule() {
  const m = modules.find((x) => x.name === $("f-module").value);
  $("f-module-info").textContent = m ? `${(m.bytes / 1024).toFixed(0)} KiB · sha256 ${m.sha256.slice(0, 12)} · ${m.spear_imports ? m.spear_imports.length : 0} spear imports` : "";
}
$("f-module").addEventListener("change", describeModule);

$("run-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  $("f-error").textContent = "";
  const request = { module: $("f-module").value };
  const args = $("f-args").value.split("\n").filter((line) => line.length);
  if (args.length) request.args = args;
  if ($("f-stdin").value) request.stdin = $("f-stdin").value;
  if ($("f-timeout").value) request.limits = { timeout: Number($("f-timeout").value) };
  $("f-submit").disabled = true;
  try {
    const run = await api("/v1/runs", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(request),
    });
    location.hash = "#/runs/" + run.id;
    refreshRuns();
  } catch (err) {
    $("f-error").textContent = err.message;
  } finally {
    $("f-submit").disabled = false;
  }
});

// ---- run view: state built from the event stream --------------------------

let stream = null;
let view = null;

function newView(run) {
  return {
    run, sessions: new Map(), tools: new Map(), usage: { prompt: 0, completion: 0, total: 0 },
    iterations: 0, toolCalls: 0, ended: false, startedAt: run.created_at * 1000, endedAt: null,
  };
}

function session(fd) {
  const key = fd === null || fd === undefined ? "run" : String(fd);
  let s = view.sessions.get(key);
  if (!s) {
    const box = el("section", "session");
    const head = el("div", "session-head", fd === null || fd === undefined ? "run" : "chat session " + fd);
    const prompt = el("div", "prompt");
    const body = el("div", "session-body");
    box.append(head, prompt, body);
    $("timeline").append(box);
    s = { box, head, prompt, body, bubbles: [], bubble: null, closed: false };
    view.sessions.set(key, s);
  }
  return s;
}

function note(s, text, kind) { s.body.append(el("div", "note " + (kind || ""), text)); }

function assistantBubble(s, iteration) {
  const bubble = el("div", "bubble assistant thinking");
  const meta = el("div", "bubble-meta", "assistant · iteration " + iteration);
  const text = el("div", "bubble-text");
  const status = el("div", "bubble-status", "thinking…");
  bubble.append(meta, text, status);
  s.body.append(bubble);
  const entry = { bubble, meta, text, status, ok: false, streamed: false };
  s.bubbles.push(entry);
  s.bubble = entry;
  return entry;
}

function toolCard(d) {
  const card = el("div", "tool-card running");
  card.dataset.tool = d.name;
  const head = el("div", "tool-head");
  const source = d.source || (d.executed ? "guest" : "host");
  const badge = el("span", "badge source-" + source, source + (d.server ? " · " + d.server : ""));
  badge.title = "where the tool ran";
  head.append(el("span", "tool-name mono", d.name), badge);
  if (d.parallel > 1) {
    // How many of the reply's calls could run at once (max_parallel_tools,
    // and the guest's thread beside them): not how many the reply has.
    const together = el("span", "badge parallel", "parallel ×" + d.parallel);
    together.title = "up to " + d.parallel + " of this reply's calls ran at the same time";
    head.append(together);
  }
  head.append(
    el("span", "muted small", "iteration " + d.iteration), el("span", "tool-state", d.cached ? "cached" : "running…"));
  const body = el("div", "tool-body");
  const args = el("div", "tool-section");
  args.append(el("div", "label", "arguments"), el("pre", "mono", d.arguments !== undefined ? pretty(d.arguments) : `${d.args_bytes} bytes · sha256 ${d.args_sha256 || "?"}`));
  const result = el("div", "tool-section result-section");
  body.append(args, result);
  card.append(head, body);
  return card;
}

const handlers = {
  run_start(d) { note(session(null), `started ${d.module} · sha256 ${String(d.sha256).slice(0, 12)}`); },
  send_start(d) { note(session(d.fd), `send to ${d.model || "?"} via ${d.backend || "?"}${d.auto ? " · automatic tool calls" : ""}`, "send"); },
  completion_start(d) { assistantBubble(session(d.fd), d.iteration); },
  completion_end(d) {
    const s = session(d.fd);
    const b = s.bubble || assistantBubble(s, d.iteration);
    b.bubble.classList.remove("thinking");
    view.iterations += 1;
    if (d.usage) {
      view.usage.prompt += d.usage.prompt_tokens || 0;
      view.usage.completion += d.usage.completion_tokens || 0;
      view.usage.total += d.usage.total_tokens || 0;
    }
    const tokens = d.usage ? ` · ${d.usage.total_tokens} tokens` : "";
    if (d.error) {
      b.bubble.classList.add("error");
      b.status.textContent = `failed: ${d.error}${d.status ? " (HTTP " + d.status + ")" : ""} · ${ms(d.latency_ms)}`;
    } else {
      b.ok = true;
      b.status.textContent = (d.tool_calls ? `asked for ${d.tool_calls} tool call${d.tool_calls > 1 ? "s" : ""}` : "replied") + ` · ${ms(d.latency_ms)}${tokens}`;
    }
  },
  token(d) {
    const s = session(d.fd);
    const b = s.bubble || assistantBubble(s, d.iteration || 0);
    const piece = d.text ?? d.delta ?? d.content ?? d.token ?? "";
    b.streamed = true;
    b.text.textContent += piece;
  },
  tool_start(d) {
    const card = toolCard(d);
    view.tools.set(d.tool_call_id, card);
    session(d.fd).body.append(card);
  },
  tool_end(d) {
    let card = view.tools.get(d.tool_call_id);
    if (!card) { card = toolCard(d); session(d.fd).body.append(card); }
    view.toolCalls += 1;
    card.classList.remove("running");
    card.classList.add(d.error ? "failed" : "done");
    card.querySelector(".tool-state").textContent = (d.error ? d.error : "ok") + (d.executed ? " · " + ms(d.duration_ms) : " · not run");
    const result = card.querySelector(".result-section");
    result.replaceChildren(el("div", "label", d.error ? "error" : "result"),
      el("pre", "mono", d.output !== undefined ? pretty(d.output) : `${d.output_bytes} bytes · sha256 ${d.output_sha256 || "?"}`));
  },
  source_unavailable(d) { note(session(d.fd), `tool source unavailable: ${d.source}${d.server ? " " + d.server : ""}: ${d.reason}`, "warn"); },
  limit_hit(d) { note(session(d.fd), `limit reached: ${d.limit} (${d.value})`, "warn"); },
  send_end(d) {
    const u = d.usage ? ` · ${d.usage.total_tokens} tokens` : "";
    note(session(d.fd), `send ${d.outcome}${d.error ? " (" + d.error + ")" : ""} · ${d.iterations} iteration(s) · ${d.tool_calls} tool call(s)${u}`, d.outcome === "ok" ? "ok" : "warn");
  },
  session_close(d) {
    const s = session(d.fd);
    s.closed = true;
    const messages = (d.transcript && d.transcript.messages) || [];
    // The transcript is the conversation exactly as the model saw it: show the
    // prompt, and give each assistant bubble the text the model replied with.
    s.prompt.replaceChildren();
    for (const m of messages) {
      if (m.role === "system" || m.role === "user") {
        const b = el("div", "bubble " + m.role);
        b.append(el("div", "bubble-meta", m.role), el("div", "bubble-text", typeof m.content === "string" ? m.content : JSON.stringify(m.content)));
        s.prompt.append(b);
      }
    }
    const replies = messages.filter((m) => m.role === "assistant");
    const bubbles = s.bubbles.filter((b) => b.ok);
    replies.forEach((m, i) => {
      const b = bubbles[i];
      if (b && typeof m.content === "string" && m.content && !b.streamed) b.text.textContent = m.content;
    });
    const last = replies[replies.length - 1];
    if (last && typeof last.content === "string" && last.content) {
      $("final-answer").textContent = last.content;
      $("final-answer-box").hidden = false;
    }
    note(s, `session closed · ${d.messages} messages`);
  },
  run_end(d) {
    view.ended = true;
    view.endedAt = d.ts * 1000;
    const code = d.exit_code === null ? "" : `, exit code ${d.exit_code}`;
    $("timeline").append(el("div", "note end " + (d.outcome === "exited" && d.exit_code === 0 ? "ok" : "warn"), `run ended: ${d.outcome}${code}`));
    showResult();
  },
};

const ENVELOPE = new Set(["kind", "run_id", "seq", "ts", "fd"]);

function describeUnknown(event) {
  // A kind this page does not know yet: show it rather than drop it.
  const fields = Object.entries(event).filter(([k]) => !ENVELOPE.has(k))
    .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`);
  return `${event.kind}${fields.length ? ": " + fields.join(" · ") : ""}`;
}

function renderStats() {
  if (!view) return;
  const run = view.run;
  const end = view.endedAt || (view.ended ? Date.now() : null);
  const elapsed = ((end || Date.now()) - view.startedAt) / 1000;
  $("st-elapsed").textContent = elapsed.toFixed(1) + " s" + (run.limits_effective && run.limits_effective.timeout ? ` / ${run.limits_effective.timeout} s` : "");
  setBar("st-elapsed-bar", elapsed, run.limits_effective && run.limits_effective.timeout);
  const loop = run.loop_limits || {};
  $("st-iterations").textContent = view.iterations + (loop.max_iterations ? ` / ${loop.max_iterations}` : "");
  setBar("st-iterations-bar", view.iterations, loop.max_iterations);
  $("st-tools").textContent = view.toolCalls + (loop.max_tool_calls ? ` / ${loop.max_tool_calls}` : "");
  setBar("st-tools-bar", view.toolCalls, loop.max_tool_calls);
  $("st-tokens").textContent = view.usage.total;
  $("st-tokens-split").textContent = `${view.usage.prompt} prompt · ${view.usage.completion} completion`;
}
setInterval(() => { if (view && !view.ended) renderStats(); }, 250);

function renderHead(run) {
  $("rv-module").textContent = run.module;
  $("rv-id").textContent = "run " + run.id + (run.host_run_id ? " · host run " + run.host_run_id : "")
    + (run.executor ? " · on " + run.executor : "");
  const pill = $("rv-status");
  pill.className = pillClass(run);
  pill.textContent = statusLabel(run);
  $("rv-cancel").hidden = !inProgress(run);
  $("rv-cancel").disabled = !!run.cancel_requested;
  const limits = run.limits_effective || {};
  const shown = Object.entries(limits).map(([k, v]) => limitText(k, v));
  $("rv-limits").textContent = shown.length ? "limits: " + shown.join(" · ") : "";
  renderOrigin(run.origin);
}

// A replay or fork names the run it came from, with a link to it.
function renderOrigin(origin) {
  const box = $("rv-origin");
  box.hidden = !origin;
  if (!origin) return;
  const link = el("a", "origin-link mono", origin.run);
  link.href = "#/runs/" + origin.run;
  const step = origin.step === null ? "" : (origin.mode === "fork" ? ` from step ${origin.step}` : ` until step ${origin.step}`);
  box.replaceChildren(el("span", "", origin.mode + " of run "), link, el("span", "", step));
}

async function showResult() {
  if (!view) return;
  const id = view.run.id;
  let run;
  try { run = await api("/v1/runs/" + id); } catch (_) { return; }
  if (!view || view.run.id !== id) return;
  view.run = Object.assign(view.run, run);
  if (inProgress(run)) return;
  if (run.ended_at) view.endedAt = run.ended_at * 1000;
  renderHead(run);
  renderStats();
  $("result").hidden = false;
  $("rs-outcome").className = pillClass(run);
  $("rs-outcome").textContent = run.outcome || run.status;
  $("exit-code").textContent = run.exit_code === null ? "–" : String(run.exit_code);
  $("rs-message").textContent = run.message || "";
  $("rs-stdout").textContent = run.stdout || "";
  $("rs-stderr").textContent = run.stderr || "";
  $("stderr-box").hidden = !run.stderr;
  showLogs(id);
  showJournal(run);
  refreshRuns();
}

// The guest's last log lines, as the service kept them (GET /v1/runs/{id}/logs).
async function showLogs(id) {
  let logs;
  try { logs = await api("/v1/runs/" + id + "/logs"); } catch (_) { return; }
  if (!view || view.run.id !== id) return;
  const lines = logs.logs.map((line) => "[" + line.level + "] " + line.text);
  if (logs.dropped) lines.unshift("(" + logs.dropped + " earlier lines not kept)");
  $("rs-logs").textContent = lines.join("\n");
  $("logs-box").hidden = lines.length === 0;
}

async function openRun(id) {
  if (stream) { stream.close(); stream = null; }
  $("new-view").hidden = true;
  $("run-view").hidden = false;
  $("timeline").replaceChildren();
  $("result").hidden = true;
  $("final-answer-box").hidden = true;
  $("final-answer").textContent = "";
  $("journal").hidden = true;
  let run;
  try { run = await api("/v1/runs/" + id); } catch (err) {
    $("timeline").append(el("div", "note warn", "cannot load run: " + err.message));
    return;
  }
  view = newView(run);
  renderHead(run);
  renderStats();
  showJournal(run);
  // Replayed from the first event, then live; the server ends the stream after run_end.
  const url = "/v1/runs/" + id + "/events" + (token() ? "?access_token=" + encodeURIComponent(token()) : "");
  const source = new EventSource(url);
  stream = source;
  source.onmessage = (message) => {
    if (stream !== source) return;
    const event = JSON.parse(message.data);
    const handle = handlers[event.kind];
    if (handle) handle(event);
    else note(session(event.fd), describeUnknown(event));
    if (event.kind === "run_end") { source.close(); stream = null; }
    renderStats();
  };
  source.onerror = () => { if (view && view.ended) source.close(); };
}

$("rv-cancel").addEventListener("click", async () => {
  if (!view) return;
  $("rv-cancel").disabled = true;
  try { await api("/v1/runs/" + view.run.id, { method: "DELETE" }); } catch (err) {
    note(session(null), "cancel failed: " + err.message, "warn");
  }
  view.run.cancel_requested = true;
  renderHead(view.run);
});

// ---- routing ----------------------------------------------------------------

function route() {
  const match = location.hash.match(/^#\/runs\/([A-Za-z0-9]+)$/);
  currentRunId = match ? match[1] : null;
  for (const item of document.querySelectorAll("#run-list li")) {
    const link = item.querySelector("a");
    item.classList.toggle("active", !!link && link.dataset.runId === currentRunId);
  }
  if (match) { openRun(match[1]); return; }
  if (stream) { stream.close(); stream = null; }
  view = null;
  $("run-view").hidden = true;
  $("new-view").hidden = false;
}

window.addEventListener("hashchange", route);
refreshRuns();
loadModules();
route();
setInterval(refreshRuns, 3000);
