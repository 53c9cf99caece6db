// The live trace: subscribes to the run's WebSocket after the last event on the
// page, appends events as they arrive (each tool call is one card), reconnects
// with backoff and resumes from the last seq, loads older events on demand and
// refreshes the run summary. Every piece of run data is set with textContent.
"use strict";

(function () {
  const timeline = document.getElementById("timeline");
  if (!timeline) return;
  const H = window.Harness;
  const el = H.el;
  const conn = document.getElementById("conn");
  const olderButton = document.getElementById("load-older");
  const emptyNote = document.getElementById("timeline-empty");
  const summary = document.getElementById("summary");
  const detailCap = Number(timeline.dataset.detailCap);
  const cards = new Map();
  let lastSeq = Number(timeline.dataset.lastSeq);
  let firstSeq = Number(timeline.dataset.firstSeq);
  let socket = null;
  let failures = 0;
  let retryTimer = null;
  let refusal = "";

  timeline.querySelectorAll("li.card[data-call-id]").forEach(function (card) {
    cards.set(card.dataset.callId, card);
  });

  // -- rendering ------------------------------------------------------------------

  function sortKeys(value) {
    if (Array.isArray(value)) return value.map(sortKeys);
    if (value && typeof value === "object") {
      const sorted = {};
      Object.keys(value).sort().forEach(function (key) { sorted[key] = sortKeys(value[key]); });
      return sorted;
    }
    return value;
  }

  function prettyJson(value) {
    const text = JSON.stringify(sortKeys(value), null, 2);
    if (text.length <= detailCap) return text;
    return text.slice(0, detailCap) + "\n… " + (text.length - detailCap) + " more characters";
  }

  function eventUrl(seq) {
    return timeline.dataset.eventUrl.replace(/\/0\/$/, "/" + Number(seq) + "/");
  }

  function setTone(node, base, tone) {
    node.className = base + " tone-" + tone;
  }

  function renderStep(event, solo) {
    const view = event.view;
    const step = el("li");
    setTone(step, solo ? "step solo" : "step", view.tone);
    step.dataset.seq = String(event.seq);
    const detail = el("details", "step-detail");
    const line = el("summary", "step-line");
    const time = el("time", "step-time", String(event.ts).slice(11, 19));
    time.setAttribute("datetime", event.ts);
    time.title = event.ts;
    line.append(el("span", "step-seq", "#" + event.seq), el("span", "step-label", view.label), el("span", "step-summary", view.summary), time);
    const full = el("a", "faint", "full event JSON (" + event.type + ")");
    full.href = eventUrl(event.seq);
    detail.append(line, el("pre", "json", prettyJson(event.payload)), full);
    step.append(detail);
    if (view.links.length) {
      const links = el("div", "step-links");
      view.links.forEach(function (link) {
        const a = el("a", "", link.label);
        a.href = H.safeHref(link.href);
        links.append(a);
      });
      step.append(links);
    }
    return step;
  }

  function renderArgs(args) {
    const box = el("details", "card-args");
    box.open = true;
    box.append(el("summary", "", "Arguments"), el("pre", "json", prettyJson(args)));
    return box;
  }

  function renderCard(event) {
    const card = el("li");
    setTone(card, "card", event.view.tone);
    card.dataset.callId = event.call_id;
    const head = el("div", "card-head");
    head.append(el("span", "card-tool", event.view.tool || "(no tool)"), el("span", "card-call", event.call_id));
    card.append(head, el("ol", "steps"));
    cards.set(event.call_id, card);
    return card;
  }

  function fillCardHeader(card, view) {
    const tool = card.querySelector(".card-tool");
    if (view.tool && tool.textContent === "(no tool)") tool.textContent = view.tool;
    if (view.args !== null && view.args !== undefined && !card.querySelector(".card-args")) {
      card.insertBefore(renderArgs(view.args), card.querySelector(".steps"));
    }
  }

  // Older events go on top (newest of them first); live events at the bottom.
  function place(event, atStart) {
    if (!event.call_id) {
      const step = renderStep(event, true);
      atStart ? timeline.prepend(step) : timeline.append(step);
      return;
    }
    let card = cards.get(event.call_id);
    if (!card) {
      card = renderCard(event);
      atStart ? timeline.prepend(card) : timeline.append(card);
    } else if (atStart) {
      timeline.prepend(card); // a call is placed where its first event is
    }
    fillCardHeader(card, event.view);
    const steps = card.querySelector(".steps");
    const step = renderStep(event, false);
    if (atStart) {
      steps.prepend(step);
    } else {
      steps.append(step);
      setTone(card, "card", event.view.tone);
    }
  }

  function nearBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 120;
  }

  function applyLive(events) {
    const follow = nearBottom();
    for (const event of events) {
      if (event.seq <= lastSeq) continue; // already shown
      if (event.seq !== lastSeq + 1) {
        // The server never skips; if it ever did, start over from what we have.
        if (socket) socket.close(4000, "gap");
        return;
      }
      place(event, false);
      lastSeq = event.seq;
    }
    if (emptyNote && lastSeq > 0) emptyNote.hidden = true;
    if (follow && events.length) window.scrollTo(0, document.body.scrollHeight);
    timeline.dataset.lastSeq = String(lastSeq);
    refreshSummarySoon();
  }

  // -- connection -----------------------------------------------------------------

  function setConn(state, text) {
    conn.dataset.state = state;
    conn.textContent = text;
  }

  function connect() {
    window.clearTimeout(retryTimer);
    retryTimer = null;
    setConn(failures ? "reconnecting" : "connecting", failures ? "reconnecting…" : "connecting…");
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + window.location.host + timeline.dataset.wsPath);
    socket = ws;
    ws.addEventListener("open", function () {
      ws.send(JSON.stringify({ type: "subscribe", after_seq: lastSeq }));
    });
    ws.addEventListener("message", function (message) {
      const data = JSON.parse(message.data);
      if (data.type === "events") applyLive(data.events);
      else if (data.type === "live") {
        failures = 0;
        setConn("live", "live");
      } else if (data.type === "error") refusal = data.error;
    });
    ws.addEventListener("close", function (closed) {
      if (socket === ws) socket = null;
      if (closed.code >= 4400 && closed.code < 4500) {
        setConn("disconnected", "disconnected: " + (refusal || "refused by the server"));
        return; // not signed in, no permission or no such run: retrying cannot help
      }
      scheduleReconnect();
    });
  }

  function scheduleReconnect() {
    failures += 1;
    const delay = Math.min(30000, 500 * Math.pow(2, failures - 1)) * (0.8 + Math.random() * 0.4);
    const state = failures > 5 ? "disconnected" : "reconnecting";
    const label = failures > 5 ? "disconnected, retrying in " : "reconnecting in ";
    setConn(state, label + H.duration(delay + 999));
    retryTimer = window.setTimeout(connect, delay);
  }

  // -- older events ---------------------------------------------------------------

  function loadOlder() {
    olderButton.disabled = true;
    const url = timeline.dataset.eventsUrl + "?before=" + encodeURIComponent(firstSeq);
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (data) {
        const events = data.events;
        for (let i = events.length - 1; i >= 0; i -= 1) place(events[i], true);
        if (events.length) firstSeq = events[0].seq;
        olderButton.textContent = "Load older events (before #" + firstSeq + ")";
        olderButton.hidden = !data.has_more;
        olderButton.disabled = false;
      })
      .catch(function (error) {
        olderButton.disabled = false;
        olderButton.textContent = "Could not load older events (" + error.message + "); try again";
      });
  }

  // -- summary --------------------------------------------------------------------

  let summaryTimer = null;
  let summaryAsked = 0;
  let summaryShown = 0;

  // The last event of a run (its stop) has no successor to refresh the summary
  // again, so a request that fails on the way or on the server is retried. Answers
  // can arrive out of order: one older than the answer shown is dropped, or a slow
  // "running" could overwrite a prompt "killed".
  function refreshSummarySoon(delay) {
    if (!summary || summaryTimer) return;
    summaryTimer = window.setTimeout(function () {
      summaryTimer = null;
      const asked = ++summaryAsked;
      fetch(timeline.dataset.summaryUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) {
          if (response.ok) return response.json();
          // Signed out or no longer allowed: asking again cannot help.
          if (response.status < 500) return null;
          throw new Error("HTTP " + response.status);
        })
        .then(function (data) {
          if (!data || asked < summaryShown) return;
          summaryShown = asked;
          applySummary(data);
        })
        .catch(function () { refreshSummarySoon(2000); });
    }, delay || 300);
  }

  function field(name) {
    return summary.querySelector('[data-field="' + name + '"]');
  }

  function fillList(name, items, render) {
    const list = summary.querySelector('[data-list="' + name + '"]');
    if (!list) return;
    list.replaceChildren();
    if (!items.length && name !== "evidence") list.append(el("li", "faint", "none"));
    items.forEach(function (item) { list.append(render(item)); });
  }

  function dotItem(tone) {
    const li = el("li", "tone-" + tone);
    li.append(el("span", "dot"));
    return li;
  }

  function link(text, href) {
    const a = el("a", "", text);
    a.href = H.safeHref(href);
    return a;
  }

  function applySummary(s) {
    const outcome = field("outcome");
    outcome.textContent = s.outcome;
    setTone(outcome, "chip chip-big", s.tone);
    field("kill-requested").hidden = !(s.kill_requested && s.active);
    const waiting = field("sandbox-waiting");
    if (waiting) {
      waiting.hidden = !s.sandbox_waiting;
      waiting.title = s.sandbox_waiting;
    }
    const message = field("stop_message");
    message.textContent = s.stop_message;
    message.hidden = !s.stop_message;
    const report = field("report");
    report.hidden = !s.report_href;
    report.href = s.report_href ? H.safeHref(s.report_href) : "#";
    const kill = field("kill");
    if (kill) kill.hidden = !s.active;
    s.budgets.forEach(function (budget) {
      const box = summary.querySelector('[data-budget="' + budget.name + '"]');
      if (!box) return;
      box.querySelector('[data-part="text"]').textContent = budget.used + budget.unit + " / " + budget.limit + budget.unit;
      box.querySelector('[data-part="meter"]').value = budget.ratio;
    });
    field("revision").textContent = s.revision;
    const current = field("evidence_current");
    current.textContent = s.evidence_current ? "evidence is current" : "no passing check on this revision: " + s.missing_checks.join(", ");
    setTone(current, "flag", s.evidence_current ? "ok" : "warn");
    fillList("evidence", s.evidence, function (check) {
      const li = dotItem(check.passed ? "ok" : "bad");
      li.append(check.check_id + (check.passed ? " passed on " : " failed on "), el("code", "", check.revision));
      if (!check.current) li.append(" (old revision)");
      if (check.output_href) li.append(" · ", link("output", check.output_href));
      return li;
    });
    fillList("pending_effects", s.pending_effects, function (effect) {
      const li = dotItem("bad");
      li.append(effect.tool + " (" + effect.call_id + ", " + effect.kind + "): " + effect.reason);
      return li;
    });
    fillList("approvals", s.approvals, function (request) {
      const li = dotItem(request.tone);
      li.append(link(request.tool, request.href), " " + request.status);
      return li;
    });
  }

  if (olderButton) olderButton.addEventListener("click", loadOlder);
  window.addEventListener("online", function () { if (retryTimer) connect(); });
  connect();
})();
