// The designer's editor page: the code editor, problems that jump to their line (and column:
// a YAML error, a CEL problem put the cursor on the character), the step
// form's write-back, and clicks on the graph that open a step's form. Works with htmx; without
// the editor bundle the plain textarea still edits and posts the document.
(function () {
  "use strict";

  function textarea() { return document.getElementById("id_text"); }
  function editor() { var t = textarea(); return t && t.switchyardEditor; }

  // Without a column the whole line is selected; with one, the cursor goes to that character.
  function goToLine(line, column) {
    var ed = editor();
    if (ed && column && ed.view) {
      var doc = ed.view.state.doc;
      var row = doc.line(Math.max(1, Math.min(line, doc.lines)));
      var at = Math.min(row.from + column - 1, row.to);
      ed.view.dispatch({ selection: { anchor: at }, scrollIntoView: true });
      ed.view.focus();
      return;
    }
    if (ed) { ed.goToLine(line); return; }
    var t = textarea();
    if (!t) return;
    var lines = t.value.split("\n");
    var start = 0;
    for (var i = 0; i < line - 1 && i < lines.length; i++) start += lines[i].length + 1;
    var end = start + (lines[line - 1] || "").length;
    t.focus();
    if (column) {
      var caret = Math.min(start + column - 1, end);
      t.setSelectionRange(caret, caret);
    } else {
      t.setSelectionRange(start, end);
    }
  }

  function showProblems() {
    var data = document.getElementById("problem-lines");
    var ed = editor();
    if (!data || !ed) return;
    try { ed.showProblems(JSON.parse(data.textContent)); } catch (e) { /* a malformed answer marks nothing */ }
  }

  function applyStepResult() {
    var data = document.getElementById("step-result");
    if (!data) return;
    var text = JSON.parse(data.textContent);
    data.remove();
    var ed = editor();
    var t = textarea();
    if (ed) {
      ed.setText(text); // fires editor-change: the graph and problems follow
    } else if (t) {
      t.value = text;
      t.dispatchEvent(new Event("input", { bubbles: true }));
    }
  }

  function openStepForm(stepId) {
    var select = document.getElementById("edit-step-select");
    var button = document.getElementById("edit-step-button");
    if (!select || !button) return;
    select.value = stepId;
    if (select.value === stepId) button.click();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var t = textarea();
    if (t && window.SwitchyardEditor) {
      var ed = window.SwitchyardEditor.attach(t, { label: "Definition document (YAML)" });
      // axe-core counts a tabindex, not contenteditable, as focusable: the editor's scroller
      // would otherwise be reported as a scrolling region the keyboard cannot reach
      ed.view.contentDOM.tabIndex = 0;
      showProblems();
    }
  });

  document.addEventListener("click", function (event) {
    var jump = event.target.closest(".problem-jump");
    if (jump) {
      event.preventDefault();
      goToLine(parseInt(jump.getAttribute("data-line"), 10), parseInt(jump.getAttribute("data-column"), 10) || 0);
      return;
    }
    var close = event.target.closest("[data-close-step-form]");
    if (close) {
      document.getElementById("step-form-area").innerHTML = "";
      return;
    }
    var node = event.target.closest("#graph [data-step]");
    if (node) openStepForm(node.getAttribute("data-step"));
  });

  // A refused step form comes back as 422 with its errors, a rate-limited live check as 429 with
  // when to try again: swap them in place (htmx swaps only 2xx by default). Clearing isError
  // keeps static/js/problems.js out of it; every other refusal is shown there.
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.xhr.status === 422 || event.detail.xhr.status === 429) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  document.addEventListener("htmx:afterSettle", function () {
    showProblems();
    applyStepResult();
  });
})();
