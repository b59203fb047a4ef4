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
      var ed = window.SwitchyardEditor.attach(t, { label: t.getAttribute("aria-label") || "Definition document (YAML)" });
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
    applyZoom();
  });

  // --- unsaved edits ------------------------------------------------------------------------
  // The document is "dirty" while its text differs from what the page was drawn with (or, when
  // the page is a refused deploy's answer, data-unsaved: the text was never stored). Leaving
  // the page then asks first: the browser's own dialog on unload, and a confirm() before an
  // htmx request that would navigate (a boosted link or one that pushes a URL). Submitting
  // the document (Deploy, Check now) is not leaving it.
  var baseline = null;
  var submitting = false;

  function isDirty() {
    var t = textarea();
    var form = document.getElementById("document-form");
    if (!t || !form) return false;
    return form.getAttribute("data-unsaved") === "true" || t.value !== baseline;
  }

  document.addEventListener("DOMContentLoaded", function () {
    var t = textarea();
    if (t) baseline = t.value;
    var form = document.getElementById("document-form");
    if (form) form.addEventListener("submit", function () { submitting = true; });
  });

  window.addEventListener("pageshow", function () { submitting = false; });

  window.addEventListener("beforeunload", function (event) {
    if (submitting || !isDirty()) return;
    event.preventDefault();
    event.returnValue = ""; // older browsers need a value to show their dialog
  });

  document.addEventListener("htmx:confirm", function (event) {
    var elt = event.detail.elt;
    var navigates = elt && (elt.closest("[hx-boost]") || elt.hasAttribute("hx-push-url"));
    if (!navigates || !isDirty()) return;
    event.preventDefault();
    if (window.confirm(document.getElementById("document-form").getAttribute("data-leave-message"))) {
      event.detail.issueRequest(true);
    }
  });

  // --- zoom ---------------------------------------------------------------------------------
  // Each .graph-zoom group drives the graph pane it names (data-zoom-target): the SVG is drawn
  // at its natural size times the zoom inside a pane that scrolls, so a large graph never
  // widens the page. "Fit" sizes it to the pane's width. The level lives on the group, which
  // the live check does not replace, so it survives the graph being redrawn.
  var STEPS = [0.25, 0.33, 0.5, 0.67, 0.75, 0.9, 1, 1.25, 1.5, 2];

  function paneOf(group) { return document.getElementById(group.getAttribute("data-zoom-target")); }

  function fitLevel(pane, svg) {
    var natural = parseFloat(svg.getAttribute("width")) || svg.getBoundingClientRect().width || 1;
    var style = getComputedStyle(pane);
    var room = pane.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    return Math.max(0.1, Math.min(1, room / natural));
  }

  function applyZoom() {
    var groups = document.querySelectorAll(".graph-zoom[data-zoom-target]");
    for (var i = 0; i < groups.length; i++) {
      var group = groups[i];
      var pane = paneOf(group);
      var svg = pane && pane.querySelector("svg");
      if (!svg) continue;
      var level = group.getAttribute("data-level");
      var zoom = level === "fit" || !level ? fitLevel(pane, svg) : parseFloat(level);
      var natural = parseFloat(svg.getAttribute("width"));
      if (natural) {
        svg.style.width = Math.round(natural * zoom) + "px";
        svg.style.height = "auto";
        svg.style.maxWidth = "none";
      }
      var shown = group.querySelector("[data-zoom-level]");
      if (shown) shown.textContent = Math.round(zoom * 100) + "%";
    }
  }

  function zoom(group, how) {
    var pane = paneOf(group);
    var svg = pane && pane.querySelector("svg");
    if (!svg) return;
    var level = group.getAttribute("data-level");
    var current = level === "fit" || !level ? fitLevel(pane, svg) : parseFloat(level);
    var next = current;
    if (how === "in") next = STEPS.filter(function (s) { return s > current + 0.001; })[0] || STEPS[STEPS.length - 1];
    if (how === "out") next = STEPS.filter(function (s) { return s < current - 0.001; }).pop() || STEPS[0];
    if (how === "actual") next = 1;
    group.setAttribute("data-level", how === "fit" ? "fit" : String(next));
    applyZoom();
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest(".graph-zoom [data-zoom]");
    if (button) zoom(button.closest(".graph-zoom"), button.getAttribute("data-zoom"));
  });

  // with the graph pane focused: + and - zoom, 0 shows the natural size, f fits
  document.addEventListener("keydown", function (event) {
    var pane = event.target.closest && event.target.closest(".graph-wrap[id]");
    if (!pane || event.ctrlKey || event.metaKey || event.altKey) return;
    var group = document.querySelector('.graph-zoom[data-zoom-target="' + pane.id + '"]');
    var how = { "+": "in", "=": "in", "-": "out", "0": "actual", "f": "fit" }[event.key];
    if (!group || !how) return;
    event.preventDefault();
    zoom(group, how);
  });

  document.addEventListener("DOMContentLoaded", applyZoom);
  window.addEventListener("resize", applyZoom);
})();
