// Expanding the context around a hunk: each row of unchanged lines the diff leaves
// out (tr.d-expand, pages/diff_view.py) asks the server for the next lines
// of that stretch, read from what the request kept of the file at its revision, and
// puts them into both layouts, so switching between them shows the same lines. The
// lines come as numbers and text, set with textContent: no markup is parsed.
(function () {
  "use strict";
  const STEP = 20;

  function cell(className, text) {
    const td = document.createElement("td");
    td.className = className;
    td.textContent = text;
    return td;
  }

  // A line's code cell from its syntax pieces, each set as text (the same classes
  // the server gives the diff's own lines). A hidden character comes as a piece of
  // its own, already marked by the server (core.visible): ["hidden", mark, name].
  function code(className, pieces) {
    const td = cell(className, "");
    pieces.forEach(function (piece) {
      if (!piece[0]) { td.append(piece[1]); return; }
      const span = document.createElement("span");
      span.className = piece[0] === "hidden" ? "hidden-char" : "tok-" + piece[0];
      span.textContent = piece[1];
      if (piece[0] === "hidden") span.title = piece[2];
      td.append(span);
    });
    return td;
  }

  function rowsOf(lines, layout) {
    return lines.map(function (line) {
      const tr = document.createElement("tr");
      if (layout === "unified") {
        tr.className = "d-ctx";
        tr.append(cell("ln", String(line.old)), cell("ln", String(line.new)), cell("mark", ""), code("code", line.pieces));
      } else {
        tr.append(cell("ln", String(line.old)), code("code d-ctx", line.pieces), cell("ln", String(line.new)), code("code d-ctx", line.pieces));
      }
      return tr;
    });
  }

  function label(row) {
    const start = Number(row.dataset.start);
    const end = Number(row.dataset.end);
    const path = row.dataset.path;
    row.querySelectorAll("[data-expand]").forEach(function (button) {
      button.hidden = false;
      const up = button.dataset.expand === "up";
      const from = up ? Math.max(start, end - STEP + 1) : start;
      const to = up ? end : Math.min(end, start + STEP - 1);
      // The name begins with the button's visible words, so one who says them (voice
      // control) reaches it (WCAG 2.5.3); the rest names the lines it shows.
      button.setAttribute("aria-label", "Show more: lines " + from + " to " + to + " of " + path + (up ? ", above the next hunk" : ", below the previous lines"));
    });
    const left = row.querySelector(".expand-left");
    if (left) left.textContent = (end - start + 1) + " unchanged lines hidden";
  }

  function expand(diff, button) {
    const row = button.closest("tr.d-expand");
    const gap = row.dataset.gap;
    const start = Number(row.dataset.start);
    const end = Number(row.dataset.end);
    const up = button.dataset.expand === "up";
    const from = up ? Math.max(start, end - STEP + 1) : start;
    const to = up ? end : Math.min(end, start + STEP - 1);
    const query = new URLSearchParams({ path: row.dataset.path, start: String(from), end: String(to) });
    button.disabled = true;
    fetch(diff.dataset.contextUrl + "?" + query.toString(), { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) {
        return response.json().then(function (body) { return { ok: response.ok, body: body }; });
      })
      .then(function (answer) {
        button.disabled = false;
        if (!answer.ok) throw new Error(answer.body.error || "the lines could not be read");
        let first = null;
        diff.querySelectorAll('tr.d-expand[data-gap="' + gap + '"]').forEach(function (twin) {
          const layout = twin.closest("table").classList.contains("diff-split") ? "split" : "unified";
          const rows = rowsOf(answer.body.lines, layout);
          if (up) twin.after.apply(twin, rows);
          else twin.before.apply(twin, rows);
          if (twin === row) first = rows[0];
          twin.dataset.start = String(up ? start : to + 1);
          twin.dataset.end = String(up ? from - 1 : end);
          if (Number(twin.dataset.start) > Number(twin.dataset.end)) twin.remove();
          else label(twin);
        });
        // The whole stretch shown: its buttons are gone, so the focus goes to the
        // first line it revealed instead of to the top of the page.
        if (!row.isConnected && first) {
          const cell = first.querySelector("td.code");
          cell.tabIndex = -1;
          cell.focus();
        }
      })
      .catch(function (error) {
        button.disabled = false;
        const left = row.querySelector(".expand-left");
        if (left) left.textContent = "Not shown: " + error.message + ".";
      });
  }

  document.querySelectorAll(".diff[data-context-url]").forEach(function (diff) {
    diff.querySelectorAll("tr.d-expand").forEach(label);
    diff.addEventListener("click", function (event) {
      const button = event.target.closest("tr.d-expand [data-expand]");
      if (button) expand(diff, button);
    });
  });
})();
