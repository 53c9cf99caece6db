// The full-output page: find text in the output. Lines that match are marked and
// counted; the first is scrolled to. Lines are compared as text, never parsed.
"use strict";

document.addEventListener("DOMContentLoaded", function () {
  const input = document.getElementById("output-filter");
  const list = document.getElementById("output-lines");
  const count = document.getElementById("output-matches");
  if (!input || !list) return;
  const lines = Array.from(list.children);
  let timer = null;
  function search() {
    const wanted = input.value.toLowerCase();
    let first = null;
    let found = 0;
    lines.forEach(function (line) {
      const hit = wanted !== "" && line.textContent.toLowerCase().includes(wanted);
      line.classList.toggle("hit", hit);
      if (hit) { found += 1; if (!first) first = line; }
    });
    count.textContent = wanted ? found + (found === 1 ? " line matches" : " lines match") : "";
    if (first) first.scrollIntoView({ block: "center" });
  }
  input.addEventListener("input", function () {
    window.clearTimeout(timer);
    timer = window.setTimeout(search, 150);
  });
});
