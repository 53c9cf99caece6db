// New-run form: choosing a template fills the contract box (and, for the scripted
// proposer, the script) so the contract can be read and edited before starting.
"use strict";

document.addEventListener("DOMContentLoaded", function () {
  // A refused form: the keyboard and the screen reader start at the list of problems.
  const problems = document.getElementById("form-problems");
  if (problems) problems.focus();
  // Who proposes: the outside agent's field only for the proposer "agent" (hidden and
  // disabled otherwise, so a choice left in it is not sent), the model's not for a script.
  const proposer = document.getElementById("id_proposer_kind");
  const agentField = document.getElementById("agent-preset-field");
  const agentPreset = document.getElementById("id_agent_preset");
  const modelField = document.getElementById("model-field");
  const modelInput = document.getElementById("id_model");
  function showAgent() {
    if (!proposer || !agentField || !agentPreset || !modelField || !modelInput) return;
    const agent = proposer.value === "agent";
    agentField.hidden = !agent;
    agentPreset.disabled = !agent;
    const scripted = proposer.value === "scripted";
    modelField.hidden = scripted;
    modelInput.disabled = scripted;
  }
  if (proposer) proposer.addEventListener("change", showAgent);
  showAgent();
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
