/* The Migrate dialog: the target graph is wider than its frame on a phone (or beside the source
   graph); bring the highlighted node into view inside the frame when the graph is drawn or
   redrawn (htmx swaps #target-graph when a row's pick changes). Without this the page works
   the same: the frame scrolls. */
(function () {
  "use strict";
  function reveal(root) {
    var pane = root && root.id === "target-graph" ? root : document.getElementById("target-graph");
    if (!pane) return;
    var frame = pane.querySelector(".graph-wrap");
    var node = frame && frame.querySelector(".wfg-current");
    if (!node) return;
    var f = frame.getBoundingClientRect();
    var n = node.getBoundingClientRect();
    frame.scrollLeft += (n.left + n.width / 2) - (f.left + f.width / 2);
  }
  document.addEventListener("DOMContentLoaded", function () { reveal(null); });
  document.addEventListener("htmx:afterSettle", function (event) { reveal(event.target); });
})();
