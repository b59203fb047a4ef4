// Times in the reader's own time zone. The server renders every time as
// <time datetime="ISO 8601 with offset" title="the same">YYYY-MM-DD HH:MM:SS</time> in UTC, which
// is what a reader without JavaScript sees (the offset in the tooltip says which zone). This
// script rewrites each one's text in the browser's zone and the page's language with
// Intl.DateTimeFormat, naming the zone ("3 Dec 2026, 15:04:05 CET"); the title keeps the
// absolute ISO time. It runs on load and again on every htmx swap (timeline pages).
(function () {
  "use strict";

  // the page's language (<html lang>, set from the active Django language), else the browser's
  var language = document.documentElement.lang || undefined;
  var format;
  try {
    format = new Intl.DateTimeFormat(language, options());
  } catch (e) {
    format = new Intl.DateTimeFormat(undefined, options()); // a tag Intl does not know
  }

  function options() { return {
    year: "numeric",
    month: "short",
    day: "numeric",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    timeZoneName: "short",
  }; }

  function localise(root) {
    var times = (root || document).querySelectorAll("time[datetime]:not([data-local])");
    for (var i = 0; i < times.length; i++) {
      var el = times[i];
      var iso = el.getAttribute("datetime");
      // Python writes microseconds; keep milliseconds, which every Date parser reads
      var when = new Date(iso.replace(/(\.\d{3})\d+/, "$1"));
      if (isNaN(when.getTime())) continue;
      el.textContent = format.format(when);
      el.title = iso;
      el.setAttribute("data-local", "");
    }
  }

  document.addEventListener("DOMContentLoaded", function () { localise(document); });
  document.addEventListener("htmx:afterSwap", function (event) { localise(event.target); });
})();
