// Page helpers used everywhere: expiry countdowns, the diff layout toggle and the
// reviewer's pending-approvals badge. Text only ever goes in through textContent.
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

  function tickCountdowns() {
    const now = Date.now();
    document.querySelectorAll("time.countdown[data-expires]").forEach(function (node) {
      const left = Date.parse(node.dataset.expires) - now;
      node.textContent = left > 0 ? duration(left) : "expired";
      node.classList.toggle("soon", left > 0 && left < 5 * 60 * 1000);
      node.classList.toggle("gone", left <= 0);
    });
  }

  function bindDiffToggles() {
    document.querySelectorAll(".diff").forEach(function (diff) {
      diff.querySelectorAll("[data-diff-view]").forEach(function (button) {
        button.addEventListener("click", function () {
          diff.dataset.view = button.dataset.diffView;
          diff.querySelectorAll("[data-diff-view]").forEach(function (other) {
            other.classList.toggle("active", other === button);
          });
        });
      });
    });
  }

  function pollBadge() {
    const badge = document.getElementById("approval-badge");
    if (!badge || !badge.dataset.poll) return;
    function refresh() {
      fetch(badge.dataset.countUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (data) {
          if (!data) return;
          badge.textContent = String(data.pending);
          badge.classList.toggle("hidden", data.pending === 0);
        })
        .catch(function () { /* the next poll tries again */ });
    }
    setInterval(refresh, 15000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    tickCountdowns();
    setInterval(tickCountdowns, 1000);
    bindDiffToggles();
    pollBadge();
  });

  return { el: el, safeHref: safeHref, duration: duration };
})();
