// Copy buttons: <button data-copy="ID"> copies the value (or text) of the element ID
// and says so in #copy-said (a polite live region); without the clipboard API the
// text is selected for the person to copy.
"use strict";

document.addEventListener("DOMContentLoaded", function () {
  const said = document.getElementById("copy-said");
  function tell(words) {
    if (said) said.textContent = words;
  }
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    button.addEventListener("click", function () {
      const source = document.getElementById(button.dataset.copy);
      if (!source) return;
      const text = "value" in source ? source.value : source.textContent;
      const label = button.getAttribute("aria-label") || "Copy";
      function selectIt() {
        if (typeof source.select === "function") source.select();
        tell("Selected: press Ctrl+C (or ⌘C) to copy.");
      }
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(function () {
          tell(label.replace(/^Copy/, "Copied") + ".");
        }, selectIt);
      } else {
        selectIt();
      }
    });
  });
});
