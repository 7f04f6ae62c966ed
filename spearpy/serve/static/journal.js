// A journaled run's steps on the page, each replayable and forkable
// (POST /v1/runs/{id}/replay and /fork). Loaded after app.js, whose helpers
// (api, el, $, view, refreshRuns) it uses; app.js calls showJournal.
"use strict";

let journal = null; // {runId, next, fork: {models, backends}}
let journalLoads = 0; // a newer first page wins over one still on its way

async function showJournal(run, more) {
  const box = $("journal");
  if (!run.urls || !run.urls.journal) { box.hidden = true; journal = null; return; }
  const first = !more;
  const load = first ? ++journalLoads : journalLoads;
  const url = first ? run.urls.journal + "?limit=100" : journal.next;
  let page;
  try { page = await api(url); } catch (_) { if (load === journalLoads) box.hidden = true; return; }
  if (!view || view.run.id !== run.id || load !== journalLoads) return;
  if (first) {
    // The same run's steps again (its view loads them, then its end does):
    // a fork form the user opened meanwhile stays open.
    if (!journal || journal.runId !== run.id) $("fork-form").hidden = true;
    $("journal-steps").replaceChildren();
    $("journal-error").textContent = "";
  }
  journal = { runId: run.id, next: page.next, fork: page.fork };
  for (const step of page.steps) $("journal-steps").append(stepItem(run, step));
  $("journal-more").hidden = !page.next;
  box.hidden = false;
}

function stepItem(run, step) {
  const item = el("li", "step");
  item.dataset.seq = step.seq;
  item.append(el("span", "step-seq mono", step.seq), el("span", "step-kind mono", step.kind),
    el("span", "step-summary mono", step.summary || ""));
  const end = step.kind === "end";
  // "to here": this step replayed too (a replay stops before `until`); the end is the whole run.
  const replay = el("button", "replay-step", "replay to here");
  replay.type = "button";
  replay.addEventListener("click", () => startFrom(run.urls.replay, end ? {} : { until: step.seq + 1 }));
  item.append(replay);
  if (!end) { // nothing is left to go live on after the end
    const fork = el("button", "fork-step", "fork from here");
    fork.type = "button";
    fork.addEventListener("click", () => askFork(step.seq));
    item.append(fork);
  }
  return item;
}

function fillChoices(select, own, allowed) {
  select.replaceChildren();
  const first = el("option", "", own ? `the run's (${own})` : "the run's");
  first.value = "";
  select.append(first);
  for (const name of allowed) {
    const option = el("option", "", name);
    option.value = name;
    select.append(option);
  }
}

function askFork(seq) {
  const run = view.run;
  $("fork-at").textContent = String(seq);
  $("fork-form").dataset.at = String(seq);
  fillChoices($("fork-model"), run.model, journal.fork.models);
  fillChoices($("fork-backend"), run.backend, journal.fork.backends);
  $("fork-form").hidden = false;
}

async function startFrom(url, body) {
  $("journal-error").textContent = "";
  try {
    const run = await api(url, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    location.hash = "#/runs/" + run.id;
    refreshRuns();
  } catch (err) {
    $("journal-error").textContent = err.message;
  }
}

$("fork-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const body = { at: Number($("fork-form").dataset.at) };
  if ($("fork-model").value) body.model = $("fork-model").value;
  if ($("fork-backend").value) body.backend = $("fork-backend").value;
  startFrom(view.run.urls.fork, body);
});
$("fork-cancel").addEventListener("click", () => { $("fork-form").hidden = true; });
$("journal-more").addEventListener("click", () => { if (view && journal) showJournal(view.run, true); });
