// Times in the reader's own time zone. The server renders every time as
// <time datetime="ISO 8601 with offset" title="the same">YYYY-MM-DD HH:MM[:SS] +0000</time>
// (the local_time filter, workflows/templatetags/switchyard_time.py), which is what a reader
// without JavaScript sees. Loaded on every page by switchyard/assets.html. This
// script rewrites each one's text in the browser's zone and the page's language with
// Intl.DateTimeFormat, naming the zone ("3 Dec 2026, 15:04:05 CET"); the title keeps the
// absolute ISO time. It runs on load and again on every htmx swap (timeline pages).
(function () {
  "use strict";

  var options = {
    year: "numeric",
    month: "short",
    day: "numeric",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    timeZoneName: "short",
  };
  // the page's language (<html lang>, set from the active Django language), else the browser's
  var language = document.documentElement.lang || undefined;
  function formatter(opts) {
    try {
      return new Intl.DateTimeFormat(language, opts);
    } catch (e) {
      return new Intl.DateTimeFormat(undefined, opts); // a tag Intl does not know
    }
  }
  var format = formatter(options);
  // a time the server wrote to the minute (the local_time filter's default) stays so
  var minutes = formatter(Object.assign({}, options, { second: undefined }));

  function localise(root) {
    var times = (root || document).querySelectorAll("time[datetime]:not([data-local])");
    for (var i = 0; i < times.length; i++) {
      var el = times[i];
      var iso = el.getAttribute("datetime");
      // Python writes microseconds; keep milliseconds, which every Date parser reads
      var when = new Date(iso.replace(/(\.\d{3})\d+/, "$1"));
      if (isNaN(when.getTime())) continue;
      // the server's text says the precision: seconds only where it shows them
      var withSeconds = /\d:\d\d:\d\d/.test(el.textContent);
      el.textContent = (withSeconds ? format : minutes).format(when);
      el.title = iso;
      el.setAttribute("data-local", "");
    }
  }

  document.addEventListener("DOMContentLoaded", function () { localise(document); });
  document.addEventListener("htmx:afterSwap", function (event) { localise(event.target); });
})();
