// The trace's filters: by event type, tool and outcome (the step's tone), kept in the
// URL (?type=&tool=&outcome=) so a filtered trace can be shared; "jump to the first
// failure"; and a call's arguments shown open once, later cards with the same tool and
// arguments collapsed. Live and older events are filtered as they arrive.
(function () {
  "use strict";
  const form = document.getElementById("trace-filters");
  const timeline = document.getElementById("timeline");
  if (!form || !timeline) return;
  const count = document.getElementById("trace-count");
  const toolSelect = form.elements.tool;
  const params = new URLSearchParams(window.location.search);
  const FIELDS = ["type", "tool", "outcome"];
  const seenArgs = new Map();

  function toneOf(node) {
    const match = /(?:^|\s)tone-(\w+)/.exec(node.className);
    return match ? match[1] : "";
  }

  function toolOf(step) {
    const card = step.closest("li.card");
    const named = card ? card.querySelector(".card-tool").textContent : step.dataset.tool;
    return named === "(no tool)" ? "" : (named || "");
  }

  function fillTools() {
    const known = new Set(Array.from(toolSelect.options).map(function (o) { return o.value; }));
    const wanted = params.get("tool");
    const tools = Array.from(timeline.querySelectorAll("li.step")).map(toolOf);
    if (wanted) tools.push(wanted);
    tools.filter(Boolean).sort().forEach(function (tool) {
      if (known.has(tool)) return;
      known.add(tool);
      const option = document.createElement("option");
      option.value = tool;
      option.textContent = tool;
      toolSelect.append(option);
    });
  }

  function collapseRepeatedArgs() {
    timeline.querySelectorAll("li.card > details.card-args:not([data-args-checked])").forEach(function (box) {
      box.dataset.argsChecked = "1";
      const card = box.parentElement;
      const key = card.querySelector(".card-tool").textContent + "\n" + box.querySelector("pre.json").textContent;
      const first = seenArgs.get(key);
      if (first && first !== card.dataset.callId) {
        box.open = false;
        box.querySelector("summary").textContent = "Arguments (the same as " + first + ")";
      } else if (!first) {
        seenArgs.set(key, card.dataset.callId);
      }
    });
  }

  function apply() {
    const want = {};
    FIELDS.forEach(function (name) { want[name] = form.elements[name].value; });
    let shown = 0;
    const steps = timeline.querySelectorAll("li.step");
    steps.forEach(function (step) {
      const match = (!want.type || step.dataset.type === want.type) &&
        (!want.outcome || toneOf(step) === want.outcome) &&
        (!want.tool || toolOf(step) === want.tool);
      step.hidden = !match;
      if (match) shown += 1;
    });
    timeline.querySelectorAll("li.card").forEach(function (card) {
      card.hidden = !card.querySelector("li.step:not([hidden])");
    });
    const filtering = FIELDS.some(function (name) { return want[name]; });
    count.textContent = filtering ? "showing " + shown + " of " + steps.length + " loaded events" : "";
  }

  function update() {
    const query = new URLSearchParams(window.location.search);
    FIELDS.forEach(function (name) {
      const value = form.elements[name].value;
      if (value) query.set(name, value); else query.delete(name);
    });
    const search = query.toString();
    window.history.replaceState(null, "", window.location.pathname + (search ? "?" + search : "") + window.location.hash);
    apply();
  }

  function refresh() {
    fillTools();
    collapseRepeatedArgs();
    apply();
  }

  fillTools();
  FIELDS.forEach(function (name) {
    const value = params.get(name);
    if (value !== null) form.elements[name].value = value;
  });
  collapseRepeatedArgs();
  apply();
  form.addEventListener("change", update);
  form.addEventListener("submit", function (event) { event.preventDefault(); update(); });
  new MutationObserver(refresh).observe(timeline, { childList: true, subtree: true });

  document.getElementById("jump-failure").addEventListener("click", function () {
    // The first refused, denied or failed step in order (live.trace marks them), so a
    // refused patch is found before the failed tests that followed it.
    const failure = timeline.querySelector("li.step[data-failure]");
    if (!failure) {
      count.textContent = "no failure among the loaded events";
      return;
    }
    if (failure.hidden || (failure.closest("li.card") || failure).hidden) {
      FIELDS.forEach(function (name) { form.elements[name].value = ""; });
      update();
    }
    const detail = failure.querySelector("details");
    if (detail) detail.open = true;
    const summary = failure.querySelector("summary");
    summary.scrollIntoView({ block: "center" });
    summary.focus();
  });
})();
