// Comments on lines of the diff, sent with "Request changes": each is three hidden
// inputs of the changes form (file, line, words), which the server checks and puts
// into the reviewer's message to the model (pages/diff_review.py). A line number of
// the diff picks its file and line.
(function () {
  "use strict";
  const panel = document.getElementById("line-comments-panel");
  const form = document.getElementById("changes-form");
  if (!panel || !form) return;
  const path = document.getElementById("lc-path");
  const line = document.getElementById("lc-line");
  const text = document.getElementById("lc-text");
  const error = document.getElementById("lc-error");
  const list = document.getElementById("line-comments");
  const message = document.getElementById("id_message");

  function hidden(name, value) {
    const input = document.createElement("input");
    input.type = "hidden";
    input.name = name;
    input.value = value;
    input.setAttribute("form", "changes-form");
    return input;
  }

  function refresh() {
    // Line comments alone are words enough for the model.
    message.required = list.children.length === 0;
  }

  document.getElementById("lc-add").addEventListener("click", function () {
    const words = text.value.trim();
    const number = parseInt(line.value, 10);
    const problems = [];
    if (!(number >= 1)) problems.push("the line must be a number from 1");
    if (!words) problems.push("write the words for the model");
    error.hidden = problems.length === 0;
    error.textContent = problems.length ? "Not added: " + problems.join("; ") + "." : "";
    if (problems.length) return;
    const item = document.createElement("li");
    const label = document.createElement("span");
    label.textContent = path.value + ", line " + number + ": " + words;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "btn btn-ghost btn-small";
    remove.textContent = "Remove";
    remove.setAttribute("aria-label", "Remove the comment on " + path.value + " line " + number);
    remove.addEventListener("click", function () { item.remove(); refresh(); line.focus(); });
    item.append(label, " ", remove, hidden("comment_path", path.value), hidden("comment_line", String(number)), hidden("comment_text", words));
    list.appendChild(item);
    text.value = "";
    refresh();
  });

  // A new-side line number of the unified diff picks that line of its file.
  const table = document.querySelector(".diff-unified");
  if (table) {
    table.addEventListener("click", function (event) {
      const cell = event.target.closest("td.ln");
      if (!cell || cell.cellIndex !== 1 || !cell.textContent.trim()) return;
      let row = cell.parentElement;
      while (row && !(row.id && row.id.indexOf("diff-file-") === 0)) row = row.previousElementSibling;
      const link = row && document.querySelector('[data-diff-file="' + row.id.slice(10) + '"]');
      if (!link) return;
      path.value = link.dataset.path;
      line.value = cell.textContent.trim();
      text.focus();
    });
  }
})();
