// The live trace: subscribes to the run's WebSocket after the last event on the
// page, appends events as they arrive in seq order (consecutive events of a tool
// call share a card), reconnects with backoff and resumes from the last seq, loads
// older events on demand, shows a running call's latest output and elapsed time,
// and refreshes the run summary. While the socket is away the page says what it
// shows is the last known (the clocks stop), until the server has caught it up.
// Every piece of run data is set with textContent.
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
    step.dataset.type = event.type;
    step.dataset.tool = view.tool || "";
    if (view.failure) step.dataset.failure = "1";
    const detail = el("details", "step-detail");
    const line = el("summary", "step-line");
    const time = el("time", "step-time", String(event.ts).slice(11, 19));
    time.setAttribute("datetime", event.ts);
    time.dataset.when = "clock";
    H.formatTimes(step);
    line.append(el("span", "step-seq", "#" + event.seq), el("span", "step-label", view.label), el("span", "step-summary", view.summary), time);
    const full = el("a", "faint", "full event JSON (" + event.type + ")");
    full.href = eventUrl(event.seq);
    detail.append(line, el("pre", "json", prettyJson(event.payload)), full);
    step.append(detail);
    // A link to the page being read (the approval page's own request) is left out.
    const elsewhere = view.links.filter(function (link) { return link.href !== window.location.pathname; });
    if (elsewhere.length) {
      const links = el("div", "step-links");
      elsewhere.forEach(function (link) {
        const a = el("a", "", link.label);
        a.href = H.safeHref(link.href);
        links.append(a);
      });
      step.append(links);
    }
    return step;
  }

  function renderArgs(view) {
    const box = el("details", "card-args");
    box.open = true;
    box.append(el("summary", "", "Arguments"));
    (view.text_args || []).forEach(function (arg) {
      const text = el("div", "arg-text");
      const name = el("div", "arg-name", arg.name + " ");
      name.append(el("span", "faint", "as text"));
      text.append(name, el("pre", "output-light", arg.text));
      box.append(text);
    });
    box.append(el("pre", "json", prettyJson(view.args)));
    return box;
  }

  function renderCard(event, continued) {
    const card = el("li");
    setTone(card, "card", event.view.tone);
    card.dataset.callId = event.call_id;
    const head = el("div", "card-head");
    head.append(el("span", "card-tool", event.view.tool || "(no tool)"), el("span", "card-call", event.call_id));
    if (continued) head.append(el("span", "faint", "continued"));
    card.append(head, el("ol", "steps"));
    return card;
  }

  function fillCardHeader(card, view) {
    const tool = card.querySelector(".card-tool");
    if (view.tool && tool.textContent === "(no tool)") tool.textContent = view.tool;
    if (view.args !== null && view.args !== undefined && !card.querySelector(".card-args")) {
      card.insertBefore(renderArgs(view), card.querySelector(".steps"));
    }
  }

  // The trace stays in seq order: consecutive events of one call share a card; a
  // call interrupted by another event continues in a new card. Older events go on
  // top, live events at the bottom.
  function place(event, atStart) {
    if (!event.call_id) {
      const step = renderStep(event, true);
      atStart ? timeline.prepend(step) : timeline.append(step);
      return;
    }
    const edge = atStart ? timeline.firstElementChild : timeline.lastElementChild;
    let card = edge && edge.classList.contains("card") && edge.dataset.callId === event.call_id ? edge : null;
    if (!card) {
      const known = cards.get(event.call_id);
      card = renderCard(event, !atStart && !!known);
      if (known && !event.view.tool) card.querySelector(".card-tool").textContent = known.querySelector(".card-tool").textContent;
      atStart ? timeline.prepend(card) : timeline.append(card);
      if (!atStart || !known) cards.set(event.call_id, card);
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
    // The approval page follows its request: its decision panel asks the server again.
    document.dispatchEvent(new CustomEvent("harness:changed", { detail: { reason: "events" } }));
  }

  // -- connection -----------------------------------------------------------------

  // -- while the server is not heard: the last known, never "running" and counting ---

  // A stop during an outage is not heard of: a clock that went on ticking would count
  // past it, and "running" would be a guess. From the moment the socket is away the
  // status reads "last known" and the clocks hold, until the page has caught up: the
  // summary answered after the server said the stream is live (events up to date).
  let stale = false;
  let staleSince = 0;
  let outages = 0;
  let freshAfterAsk = Infinity;
  const AWAY = ["offline", "reconnecting", "disconnected", "quiet"];

  function showStale() {
    H.holdClocks(true);
    const note = "No word from the server since " + H.clockText(new Date(staleSince)) + ": the status and times shown are the last known; they update when it is back.";
    document.querySelectorAll("[data-clocks-held]").forEach(function (node) {
      node.textContent = note;
      node.hidden = false;
    });
    if (!summary) return;
    const outcome = field("outcome");
    if (!outcome.dataset.lastKnown) {
      outcome.dataset.lastKnown = "1";
      outcome.textContent = "last known: " + outcome.textContent;
      setTone(outcome, "chip chip-big", "muted");
    }
  }

  function showFresh() {
    stale = false;
    freshAfterAsk = Infinity;
    H.holdClocks(false);
    document.querySelectorAll("[data-clocks-held]").forEach(function (node) { node.hidden = true; });
  }

  function onState(state, lastHeard) {
    if (AWAY.includes(state)) {
      if (!stale) {
        staleSince = lastHeard;
        outages += 1;
      }
      stale = true;
      freshAfterAsk = Infinity;
      showStale();
    } else if (state === "live" && stale) {
      if (summary) {
        freshAfterAsk = summaryAsked + 1;
        refreshSummarySoon();
        return;
      }
      // The approval page: its clocks are a live region, fetched again (live_regions.js)
      // after the events of the catch-up; they are let go once it has been.
      const outage = outages;
      document.addEventListener("harness:regions", function () { if (stale && outage === outages) showFresh(); }, { once: true });
      document.dispatchEvent(new CustomEvent("harness:changed", { detail: { reason: "reconnected" } }));
    }
  }

  function connect() {
    H.liveSocket({
      path: timeline.dataset.wsPath,
      indicator: conn,
      retryButton: document.getElementById("conn-retry"),
      onState: onState,
      onOpen: function (ws) {
        socket = ws;
        ws.send(JSON.stringify({ type: "subscribe", after_seq: lastSeq }));
      },
      onLive: function () { refreshSummarySoon(); },
      onMessage: function (data) {
        if (data.type === "events") applyLive(data.events);
        else if (data.type === "output") showOutput(data);
      },
    });
  }

  // -- a running call: its latest output and how long it has been running ------------

  // Ephemeral: the server sends the last lines while the call runs and never stores
  // them; the call's receipt replaces them with the link to the full output.
  function showOutput(data) {
    const card = cards.get(data.call_id);
    if (!card || !isRunning(card)) return;
    let box = card.querySelector(".live-output");
    if (!box) {
      box = el("div", "live-output");
      box.append(el("div", "live-output-head"), el("pre", "output"));
      box.setAttribute("aria-label", "latest output of the running call");
      card.append(box);
    }
    box.querySelector(".live-output-head").textContent = "live output, last " + data.lines.length + " lines (" + data.total_bytes + " bytes so far)";
    box.querySelector("pre").textContent = data.lines.join("\n");
  }

  function isRunning(card) {
    const last = card.querySelector(".steps > li.step:last-child");
    return !!last && last.dataset.type === "call_started";
  }

  function tickRunning() {
    if (stale) return; // a call's clock holds too: it may have ended meanwhile
    timeline.querySelectorAll("li.card[data-call-id]").forEach(function (card) {
      // Only a call's latest card can be running; an earlier one was interrupted.
      const running = cards.get(card.dataset.callId) === card && isRunning(card);
      let clock = card.querySelector(".card-elapsed");
      if (!running) {
        if (clock) clock.remove();
        const box = card.querySelector(".live-output");
        if (box) box.remove();
        return;
      }
      if (!clock) {
        clock = el("span", "card-elapsed");
        card.querySelector(".card-head").append(clock);
      }
      const since = Date.parse(card.querySelector(".steps > li.step:last-child time").getAttribute("datetime"));
      clock.textContent = "running for " + H.duration(Date.now() - since);
    });
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
          if (stale && asked >= freshAfterAsk) showFresh();
          else if (stale) showStale();
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

  // The server links only pages of the configured forge; here, only http(s) is taken.
  function forgeLink(text, href) {
    const a = el("a", "", text);
    a.href = /^https?:\/\//.test(href) ? href : "#";
    a.rel = "noreferrer";
    return a;
  }

  function applySummary(s) {
    const outcome = field("outcome");
    delete outcome.dataset.lastKnown;
    outcome.textContent = s.outcome_label;
    outcome.title = s.outcome;
    setTone(outcome, "chip chip-big", s.tone);
    field("kill-requested").hidden = !(s.kill_requested && s.active);
    const waiting = field("sandbox-waiting");
    if (waiting) {
      waiting.hidden = !s.sandbox_waiting;
      waiting.title = s.sandbox_waiting;
    }
    H.setClock(field("working"), s.working_seconds, s.status === "running");
    H.setClock(field("waited"), s.waited_seconds, s.status === "waiting_approval");
    const message = field("said");
    message.textContent = s.said;
    message.hidden = !s.said;
    ["report", "result"].forEach(function (name) {
      const link = field(name);
      const href = s[name + "_href"];
      link.hidden = !href;
      link.href = href ? H.safeHref(href) : "#";
    });
    const kill = field("kill");
    if (kill) kill.hidden = !s.active;
    s.budgets.forEach(function (budget) {
      const box = summary.querySelector('[data-budget="' + budget.name + '"]');
      if (!box) return;
      box.dataset.limit = String(budget.limit);
      box.querySelector('[data-part="text"]').textContent = budget.used + budget.unit + " / " + budget.limit + budget.unit;
      box.querySelector('[data-part="meter"]').value = budget.ratio;
    });
    H.tickClocks(); // a time budget follows its clock (harness.js), in the same tick
    field("revision").textContent = s.revision;
    // The base is known once the worker has prepared the workspace, after the page came.
    const base = field("base");
    base.replaceChildren();
    if (s.base_revision) base.append(el("code", "", s.base_revision));
    if (s.base_note) base.append(s.base_revision ? " " : "", el("span", "muted", s.base_note));
    const current = field("evidence_current");
    current.textContent = s.evidence_current ? "evidence is current" : "no passing check on this revision: " + s.missing_checks.join(", ");
    setTone(current, "flag", s.evidence_current ? "ok" : "warn");
    fillList("evidence", s.evidence, function (check) {
      const li = dotItem(check.passed ? "ok" : "bad");
      li.append(check.check_id + (check.passed ? " passed on " : " failed on "), el("code", "", check.revision));
      if (!check.current) li.append(" (old revision)");
      if (check.output_href) li.append(" · ", link("output", check.output_href));
      if (check.network) li.append(" · network: " + check.network);
      return li;
    });
    fillList("pending_effects", s.pending_effects, function (effect) {
      const li = dotItem("bad");
      li.append(effect.tool + " (" + effect.call_id + ", " + effect.kind + "): " + effect.reason);
      return li;
    });
    fillList("published", s.published || [], function (item) {
      const li = dotItem("ok");
      if (item.kind === "branch") {
        li.append("branch ", item.href ? forgeLink(item.branch, item.href) : el("code", "", item.branch), " at ", el("code", "", item.commit), " on ", el("span", "mono", item.remote));
      } else {
        const text = (item.number ? "#" + item.number + " " : "") + item.title;
        li.append("change request ", item.href ? forgeLink(text, item.href) : text);
        if (!item.href && item.url) li.append(" ", el("span", "mono", item.url));
        if (item.target) li.append(" into ", el("code", "", item.target));
      }
      return li;
    });
    fillList("approvals", s.approvals, function (request) {
      const li = dotItem(request.tone);
      li.append(link(request.tool, request.href), " " + request.status_label);
      return li;
    });
  }

  if (olderButton) olderButton.addEventListener("click", loadOlder);
  window.setInterval(tickRunning, 1000);
  connect();
})();
