// New-run form: choosing a template fills the contract box (and, for the scripted
// proposer, the script) so the contract can be read and edited before starting.
"use strict";

document.addEventListener("DOMContentLoaded", function () {
  // A refused form: the keyboard and the screen reader start at the list of problems.
  const problems = document.getElementById("form-problems");
  if (problems) problems.focus();
  const source = document.getElementById("contract-templates");
  const picker = document.getElementById("id_template");
  if (!source || !picker) return;
  const templates = JSON.parse(source.textContent);
  const contract = document.getElementById("id_contract");
  const kind = document.getElementById("id_proposer_kind");
  const options = document.getElementById("id_proposer_options");

  function fill() {
    const chosen = templates[picker.value];
    if (!chosen) return;
    contract.value = chosen.contract;
    if (kind.value === "scripted" && chosen.script) {
      options.value = JSON.stringify({ script: JSON.parse(chosen.script) }, null, 2);
    }
  }

  picker.addEventListener("change", fill);
  kind.addEventListener("change", function () {
    if (kind.value !== "scripted") options.value = "";
    else fill();
  });
});
