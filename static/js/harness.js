// Page helpers used everywhere: times in the viewer's zone, expiry countdowns, the
// diff layout toggle, and one live-socket helper with an honest connection
// indicator (offline, heartbeat, a ticking reconnect countdown, "retry now").
// Text only ever goes in through textContent.
"use strict";

window.Harness = (function () {
  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  // Links come from the server as site-relative paths; anything else is not followed.
  function safeHref(href) {
    return typeof href === "string" && href.startsWith("/") && !href.startsWith("//") ? href : "#";
  }

  function duration(ms) {
    const total = Math.max(0, Math.floor(ms / 1000));
    const h = Math.floor(total / 3600);
    const m = Math.floor((total % 3600) / 60);
    const s = total % 60;
    if (h > 0) return h + "h " + String(m).padStart(2, "0") + "m";
    if (m > 0) return m + "m " + String(s).padStart(2, "0") + "s";
    return s + "s";
  }

  // -- times: one format everywhere, in the viewer's zone, UTC on hover ----------

  const two = function (n) { return String(n).padStart(2, "0"); };

  function zoneName(date) {
    const part = new Intl.DateTimeFormat("en-GB", { timeZoneName: "short" })
      .formatToParts(date).find(function (p) { return p.type === "timeZoneName"; });
    return part ? part.value : "";
  }

  function clockText(date) {
    return two(date.getHours()) + ":" + two(date.getMinutes()) + ":" + two(date.getSeconds());
  }

  // "2026-11-30 19:24:26 CET"; with short, only the time of day and the zone.
  function formatTime(date, short) {
    const day = date.getFullYear() + "-" + two(date.getMonth() + 1) + "-" + two(date.getDate());
    return (short ? "" : day + " ") + clockText(date) + " " + zoneName(date);
  }

  function utcText(date) {
    return date.toISOString().replace("T", " ").slice(0, 19) + " UTC";
  }

  function agoText(date, now) {
    const seconds = Math.round((now - date.getTime()) / 1000);
    if (seconds < 60) return "just now";
    if (seconds < 3600) return Math.floor(seconds / 60) + " min ago";
    if (seconds < 86400) return Math.floor(seconds / 3600) + " h ago";
    return formatTime(date, false);
  }

  // <time data-when="full|clock|ago" datetime="ISO">: the server writes UTC; the
  // page rewrites it in the viewer's zone, with the UTC time as the tooltip.
  function formatTimes(root) {
    const now = Date.now();
    (root || document).querySelectorAll("time[data-when]").forEach(function (node) {
      const date = new Date(node.getAttribute("datetime"));
      if (isNaN(date.getTime())) return;
      const kind = node.dataset.when;
      const text = kind === "ago" ? agoText(date, now) : formatTime(date, kind === "clock");
      if (node.textContent !== text) node.textContent = text;
      node.title = utcText(date);
    });
  }

  function tickCountdowns() {
    const now = Date.now();
    document.querySelectorAll("time.countdown[data-expires]").forEach(function (node) {
      const left = Date.parse(node.dataset.expires) - now;
      node.textContent = left > 0 ? duration(left) : "0s (expired)";
      node.classList.toggle("soon", left > 0 && left < 5 * 60 * 1000);
      node.classList.toggle("gone", left <= 0);
      // The server decides what an expired request can still do: ask it once.
      if (left <= 0 && !node.dataset.expiredSeen) {
        node.dataset.expiredSeen = "1";
        document.dispatchEvent(new CustomEvent("harness:changed", { detail: { reason: "expired" } }));
      }
    });
  }

  // A run's clocks (templates/runs/_clocks.html): the server's count when the element
  // was first seen here, plus, for the clock that runs now, the time since. A time
  // budget (data-budget-clock) shows its clock's whole seconds: one count, one
  // rounding (down, as a stopwatch does), so the clock and the budget always agree.
  // A held clock (holdClocks) shows the count it had when it was held.
  function clockWholeSeconds(node, now) {
    if (node.dataset.clockHeld) return Number(node.dataset.clockHeld);
    if (!node.dataset.clockAt) node.dataset.clockAt = String(now);
    const since = node.dataset.clockTicks === "1" ? now - Number(node.dataset.clockAt) : 0;
    return Math.max(0, Math.floor(Number(node.dataset.clockSeconds) + since / 1000));
  }

  function tickClocks() {
    const now = Date.now();
    document.querySelectorAll("[data-clock-seconds]").forEach(function (node) {
      const text = duration(clockWholeSeconds(node, now) * 1000);
      if (node.textContent !== text) node.textContent = text;
    });
    document.querySelectorAll("[data-budget-clock]").forEach(function (box) {
      const clock = document.querySelector('[data-field="' + box.dataset.budgetClock + '"][data-clock-seconds]');
      if (!clock) return;
      const limit = Number(box.dataset.limit);
      const used = Math.min(limit, clockWholeSeconds(clock, now));
      const text = used + "s / " + limit + "s";
      const shown = box.querySelector('[data-part="text"]');
      if (shown.textContent !== text) shown.textContent = text;
      box.querySelector('[data-part="meter"]').value = limit ? Math.min(1, used / limit) : 1;
    });
  }

  function setClock(node, seconds, ticking) {
    if (!node) return;
    node.dataset.clockSeconds = String(seconds);
    node.dataset.clockAt = String(Date.now());
    delete node.dataset.clockHeld;
    if (ticking) node.dataset.clockTicks = "1"; else delete node.dataset.clockTicks;
    tickClocks();
  }

  // While the page cannot hear the server, a clock that ticked here would count past
  // a stop it has not heard of: the clocks stop where they are and say so. Let go,
  // a clock the server did not set again goes on from its own count, as if never held.
  function holdClocks(held) {
    const now = Date.now();
    document.querySelectorAll("[data-clock-seconds]").forEach(function (node) {
      if (held && !node.dataset.clockHeld) node.dataset.clockHeld = String(clockWholeSeconds(node, now));
      if (!held) delete node.dataset.clockHeld;
    });
    tickClocks();
  }

  // Side by side needs two readable columns: on a narrow screen a diff starts unified.
  const SPLIT_MIN_WIDTH = 700;

  function bindDiffToggles() {
    document.querySelectorAll(".diff").forEach(function (diff) {
      const buttons = diff.querySelectorAll("[data-diff-view]");
      function show(view) {
        diff.dataset.view = view;
        buttons.forEach(function (other) {
          const on = other.dataset.diffView === view;
          other.classList.toggle("active", on);
          other.setAttribute("aria-pressed", on ? "true" : "false");
        });
      }
      buttons.forEach(function (button) {
        button.addEventListener("click", function () { show(button.dataset.diffView); });
      });
      // The file tree's links name the unified table's header row; side by side,
      // the same file's header is the split table's.
      diff.querySelectorAll("[data-diff-file]").forEach(function (link) {
        link.addEventListener("click", function (event) {
          if (diff.dataset.view !== "split") return;
          const row = document.getElementById("diff-file-" + link.dataset.diffFile + "-split");
          if (!row) return;
          event.preventDefault();
          row.scrollIntoView();
        });
      });
      if (diff.dataset.view === "split" && diff.clientWidth < SPLIT_MIN_WIDTH) show("unified");
    });
  }

  // -- one live socket ------------------------------------------------------------

  // Opens a WebSocket to opts.path and keeps it open: reconnects with backoff and a
  // countdown that ticks, goes "offline" with the browser, says "no updates since"
  // when two heartbeats are missed, offers "retry now". opts.onOpen(ws) runs on each
  // open, opts.onMessage(data) for each message other than live/heartbeat/error,
  // opts.onLive(data) when the server says the stream is live, opts.onState(state,
  // lastHeard) when the indicator's state changes (lastHeard: when the server was
  // last heard, in ms).
  function liveSocket(opts) {
    const conn = opts.indicator;
    const retry = opts.retryButton;
    let socket = null;
    let failures = 0;
    let retryTimer = null;
    let retryAt = 0;
    let refusal = "";
    let refused = false;
    let heartbeatMs = 0;
    let lastHeard = Date.now();
    let live = false;

    let shownState = "connecting";

    function set(state, text) {
      if (state !== shownState) {
        shownState = state;
        if (opts.onState) opts.onState(state, lastHeard);
      }
      if (!conn) return;
      if (conn.dataset.state !== state || conn.textContent !== text) {
        conn.dataset.state = state;
        conn.textContent = text;
      }
      if (retry) retry.hidden = refused || state === "live" || state === "connecting";
    }

    function since() {
      return "no updates since " + clockText(new Date(lastHeard));
    }

    function connect() {
      window.clearTimeout(retryTimer);
      retryTimer = null;
      if (!navigator.onLine) {
        set("offline", "offline, " + since());
        return;
      }
      live = false;
      set(failures ? "reconnecting" : "connecting", failures ? "reconnecting…" : "connecting…");
      const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
      const ws = new WebSocket(scheme + window.location.host + opts.path);
      socket = ws;
      ws.addEventListener("open", function () { if (opts.onOpen) opts.onOpen(ws); });
      ws.addEventListener("message", function (message) {
        if (socket !== ws) return;
        lastHeard = Date.now();
        const data = JSON.parse(message.data);
        if (data.type === "live") {
          failures = 0;
          live = true;
          heartbeatMs = (Number(data.heartbeat_seconds) || 0) * 1000;
          set("live", "live");
          if (opts.onLive) opts.onLive(data);
        } else if (data.type === "heartbeat") {
          if (live) set("live", "live");
        } else if (data.type === "error") {
          refusal = data.error;
        } else if (opts.onMessage) {
          if (live) set("live", "live");
          opts.onMessage(data);
        }
      });
      ws.addEventListener("close", function (closed) {
        if (socket !== ws) return;
        socket = null;
        live = false;
        if (closed.code >= 4400 && closed.code < 4500) {
          refused = true;
          set("disconnected", "disconnected: " + (refusal || "refused by the server"));
          return; // not signed in, no permission or no such thing: retrying cannot help
        }
        if (!navigator.onLine) {
          set("offline", "offline, " + since());
          return; // the "online" event reconnects
        }
        scheduleReconnect();
      });
    }

    function drop() {
      const ws = socket;
      socket = null;
      if (ws) ws.close();
    }

    function scheduleReconnect() {
      failures += 1;
      const delay = Math.min(30000, 500 * Math.pow(2, failures - 1)) * (0.8 + Math.random() * 0.4);
      retryAt = Date.now() + delay;
      retryTimer = window.setTimeout(connect, delay);
      tick();
    }

    function tick() {
      if (refused) return;
      const now = Date.now();
      if (!navigator.onLine) {
        set("offline", "offline, " + since());
      } else if (retryTimer) {
        const left = "in " + duration(retryAt - now + 999);
        set(failures > 5 ? "disconnected" : "reconnecting", (failures > 5 ? "disconnected, retrying " : "reconnecting ") + left);
      } else if (live && heartbeatMs && now - lastHeard > 2 * heartbeatMs + 500) {
        set("quiet", since());
      }
    }

    function retryNow() {
      drop();
      connect();
    }

    if (retry) retry.addEventListener("click", retryNow);
    window.addEventListener("offline", function () {
      drop();
      window.clearTimeout(retryTimer);
      retryTimer = null;
      live = false;
      set("offline", "offline, " + since());
    });
    window.addEventListener("online", function () { if (!socket) connect(); });
    window.setInterval(tick, 1000);
    connect();
    return { retryNow: retryNow };
  }

  // Buttons that act on something the server may have closed meanwhile follow a
  // region's data-decidable (the approval page's Grant and Deny).
  function syncDecisionButtons() {
    document.querySelectorAll("[data-enabled-by]").forEach(function (button) {
      const region = document.getElementById(button.dataset.enabledBy);
      if (region) button.disabled = region.dataset.decidable !== "1";
    });
  }

  // -- keyboard --------------------------------------------------------------------

  // "d" jumps to the page's decision (or main action), as the skip link does.
  function bindShortcut() {
    document.addEventListener("keydown", function (event) {
      if (event.key !== "d" || event.ctrlKey || event.metaKey || event.altKey) return;
      const target = event.target;
      if (target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) return;
      const decision = document.getElementById("decision");
      if (!decision) return;
      event.preventDefault();
      decision.scrollIntoView({ block: "start" });
      decision.focus();
    });
  }

  // A box that scrolls sideways (an admin table on a phone: admin.css) and holds
  // nothing to focus is made focusable, so a keyboard can scroll it too.
  function reachScrollBoxes() {
    if (!window.matchMedia("(max-width: 767px)").matches) return;
    document.querySelectorAll(".inline-group .tabular").forEach(function (box) {
      if (!box.querySelector("a[href], button, input:not([type=hidden]), select, textarea, [tabindex]")) {
        box.tabIndex = 0;
        box.setAttribute("role", "region");
        box.setAttribute("aria-label", "table, scrolls sideways");
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    reachScrollBoxes();
    formatTimes(document);
    tickCountdowns();
    tickClocks();
    setInterval(function () { tickCountdowns(); tickClocks(); formatTimes(document); }, 1000);
    bindDiffToggles();
    bindShortcut();
    syncDecisionButtons();
    document.addEventListener("harness:regions", syncDecisionButtons);
  });

  return { el: el, safeHref: safeHref, duration: duration, formatTimes: formatTimes, tickCountdowns: tickCountdowns, setClock: setClock, holdClocks: holdClocks, tickClocks: tickClocks, clockText: clockText, liveSocket: liveSocket };
})();
