// Live regions: the runs list, the approvals inbox, the control page and the
// approval page's decision follow changes without a reload. When the lists socket
// (or the run's trace, on the approval page) says something changed, the page
// fetches itself again and swaps in its marked regions.
//
// This is the one script that parses markup, and only this: the same-origin page it
// is showing, rendered (and escaped) by the server's templates for this viewer.
// Event data and tool output are never parsed as HTML anywhere.
"use strict";

(function () {
  const H = window.Harness;
  // -- live regions -----------------------------------------------------------------

  // Elements marked data-live-region (with an id) are replaced by the same element
  // of a fresh copy of this page; one with data-version is only replaced when its
  // version changed (so nothing is redrawn under a reader for nothing).
  let refreshTimer = null;
  let refreshing = false;
  let refreshAgain = false;

  function refreshRegions() {
    if (refreshing) { refreshAgain = true; return; }
    refreshing = true;
    fetch(window.location.pathname + window.location.search, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (!html) return;
        const fresh = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live-region][id]").forEach(function (old) {
          const next = fresh.getElementById(old.id);
          if (!next) return;
          if (old.dataset.version !== undefined && old.dataset.version === next.dataset.version) return;
          const adopted = document.importNode(next, true);
          old.replaceWith(adopted);
          H.formatTimes(adopted);
        });
        H.tickCountdowns();
        document.dispatchEvent(new CustomEvent("harness:regions"));
      })
      .catch(function () { /* the next change or reconnect asks again */ })
      .finally(function () {
        refreshing = false;
        if (refreshAgain) { refreshAgain = false; refreshSoon(); }
      });
  }

  // Changes come in bursts (a run writes several events a second): one refetch per
  // burst, at most one in flight.
  function refreshSoon() {
    if (refreshTimer) return;
    refreshTimer = window.setTimeout(function () { refreshTimer = null; refreshRegions(); }, 600);
  }

  function refreshBadge() {
    const badge = document.getElementById("approval-badge");
    if (!badge || !badge.dataset.countUrl) return;
    fetch(badge.dataset.countUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (data) {
        if (!data) return;
        badge.textContent = String(data.pending);
        badge.classList.toggle("hidden", data.pending === 0);
      })
      .catch(function () { /* the next change asks again */ });
  }

  function watchLists() {
    const regions = document.querySelector("[data-live-region]");
    const badge = document.getElementById("approval-badge");
    if (!regions && !(badge && badge.dataset.live)) return;
    document.addEventListener("harness:changed", function () { refreshSoon(); refreshBadge(); });
    if (!document.body.dataset.listsSocket) return;
    let opened = false;
    H.liveSocket({
      path: "/ws/lists/",
      indicator: document.getElementById("lists-conn"),
      retryButton: document.getElementById("lists-retry"),
      // Whatever changed while the socket was away is fetched on every reconnect.
      onLive: function () {
        if (opened) { refreshSoon(); refreshBadge(); }
        opened = true;
      },
      onMessage: function (data) {
        if (data.type === "changed") { refreshSoon(); refreshBadge(); }
      },
    });
  }

  document.addEventListener("DOMContentLoaded", watchLists);
})();
