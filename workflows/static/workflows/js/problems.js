// One error path for every htmx request of the product. htmx swaps only 2xx answers and says
// nothing when the server cannot be reached, so a refusal the server explains (a 422 with a
// good message) would never be seen and an older message could stay on screen and mislead.
// This script shows every refusal next to the control that caused it.
//
// The convention (server and pages):
// - A refusal is a non-2xx answer in application/problem+json: {title, detail, violations:
//   [{pointer, message}]}. Any other non-2xx answer that no page swapped is shown by its
//   status alone (a page may still swap its own HTML error fragment into the target by
//   clearing event.detail.isError in htmx:beforeSwap, as the designer does for 422 and 429;
//   htmx then raises no htmx:responseError and this script stays out of the way).
// - Where: the element that issued the request, or its nearest ancestor, names its alert
//   region with data-problems="<CSS selector>". Without one, a region is made right after the
//   element (after its form when it is in one). Regions are role="alert" aria-live="assertive".
// - data-clears="<CSS selector>" on the element itself (not inherited) names what else shows
//   the answer to its earlier request (an older preview, say): emptied when it sends again.
// - A violation whose pointer names a field of the request's form ("/do_1" for name="do_1")
//   marks that field aria-invalid, so the row at fault is marked too.
// - htmx:beforeRequest empties the region and the marks, so a message never outlives the next
//   request.
// - A problem may carry links: [{href, title}] to pages about the refusal (the migration that
//   holds the runs, say); only paths of this site ("/…", never "//…") are shown, as links after
//   the detail.
// Texts come from the answer: they are set with textContent only, never parsed as HTML.
(function () {
  "use strict";

  // English defaults; the page's language comes from the script element's data-title-N and
  // data-detail-N attributes (switchyard/assets.html renders them translated)
  var SCRIPT = document.currentScript;
  var STATUS_TEXT = {
    0: ["The server could not be reached", "Check the connection and try again; reload the page to see what was saved."],
    400: ["The request was refused", "This page is out of date; reload it and try again."],
    401: ["You are signed out", "Sign in again, then repeat what you were doing."],
    403: ["Not allowed", "You are not allowed to do this. Ask an administrator for the permission."],
    404: ["Not found", "What this page refers to no longer exists; reload the page."],
    409: ["Changed meanwhile", "Something changed since this page was drawn; reload it."],
    413: ["Too large", "The request is larger than the server accepts."],
    429: ["Too many requests", "Wait a moment and try again."],
    500: ["The server failed", "Nothing may have been saved. Try again in a moment; if it keeps failing, tell an administrator."]
  };

  function declared(elt, attribute) {
    var holder = elt.closest ? elt.closest("[" + attribute + "]") : null;
    return holder ? document.querySelector(holder.getAttribute(attribute)) : null;
  }

  function region(elt, create) {
    var found = declared(elt, "data-problems");
    if (found) return found;
    // an undeclared element's region follows it, and outlives the element's own swaps
    // (a polling table replaced outerHTML finds the region its predecessor made)
    var anchor = elt.closest("form") || elt;
    var next = anchor.nextElementSibling;
    if (next && next.hasAttribute("data-problems-made")) return next;
    if (!create || !anchor.parentNode) return null;
    var made = document.createElement("div");
    made.className = "problems";
    made.setAttribute("role", "alert");
    made.setAttribute("aria-live", "assertive");
    made.setAttribute("data-problems-made", "");
    anchor.insertAdjacentElement("afterend", made);
    return made;
  }

  function translated(which, status, fallback) {
    var text = SCRIPT ? SCRIPT.getAttribute("data-" + which + "-" + status) : null;
    return text || fallback;
  }

  function problemOf(xhr) {
    var type = (xhr && xhr.getResponseHeader("Content-Type")) || "";
    if (type.indexOf("application/problem+json") === 0) {
      try {
        var body = JSON.parse(xhr.responseText);
        if (body && typeof body === "object" && body.title) return body;
      } catch (e) { /* an unreadable problem is shown by its status */ }
    }
    var status = xhr ? xhr.status : 0;
    var known = STATUS_TEXT[status] ? status : (status >= 500 ? 500 : 400);
    var text = STATUS_TEXT[known];
    return { title: translated("title", known, text[0]), detail: translated("detail", known, text[1]), status: status, violations: [] };
  }

  function paragraph(className, text) {
    var p = document.createElement("p");
    p.className = className;
    p.textContent = String(text);
    return p;
  }

  function fields(elt, violations) {
    var form = elt.closest("form");
    if (!form) return [];
    return violations
      .map(function (v) { return v && typeof v.pointer === "string" ? v.pointer.slice(1) : ""; })
      .filter(function (name) { return name && name.indexOf("/") < 0; })
      .map(function (name) { return form.querySelector("[name=\"" + CSS.escape(name) + "\"]"); })
      .filter(Boolean);
  }

  function unmark(elt) {
    var form = elt.closest("form");
    if (!form) return;
    form.querySelectorAll("[data-problem-marked]").forEach(function (field) {
      field.removeAttribute("aria-invalid");
      field.removeAttribute("data-problem-marked");
    });
  }

  function show(elt, problem) {
    var made = !region(elt, false);
    var target = region(elt, true);
    if (!target) return; // the element left the page meanwhile
    var box = document.createElement("div");
    box.className = "problem";
    box.setAttribute("data-status", String(problem.status || 0));
    box.appendChild(paragraph("problem-title", problem.title));
    if (problem.detail) box.appendChild(paragraph("problem-detail", problem.detail));
    var links = Array.isArray(problem.links) ? problem.links : [];
    links.forEach(function (link) {
      var href = link && typeof link.href === "string" ? link.href : "";
      if (href.charAt(0) !== "/" || href.charAt(1) === "/" || href.charAt(1) === "\\" || !link.title) return;
      var p = document.createElement("p");
      p.className = "problem-link";
      var a = document.createElement("a");
      a.href = href;
      a.textContent = String(link.title);
      p.appendChild(a);
      box.appendChild(p);
    });
    var violations = Array.isArray(problem.violations) ? problem.violations : [];
    fields(elt, violations).forEach(function (field) {
      field.setAttribute("aria-invalid", "true");
      field.setAttribute("data-problem-marked", "");
    });
    var messages = violations.map(function (v) { return v && v.message; }).filter(Boolean);
    if (messages.length) {
      var list = document.createElement("ul");
      list.className = "problem-violations";
      messages.forEach(function (m) {
        var li = document.createElement("li");
        li.textContent = String(m);
        list.appendChild(li);
      });
      box.appendChild(list);
    }
    // a region made just now is filled a moment later, so screen readers announce the change
    if (made) window.setTimeout(function () { target.replaceChildren(box); }, 50);
    else target.replaceChildren(box);
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail.elt;
    var own = region(elt, false);
    if (own) own.replaceChildren();
    unmark(elt);
    var stale = elt.hasAttribute("data-clears") ? document.querySelector(elt.getAttribute("data-clears")) : null;
    if (stale) stale.replaceChildren();
  });

  document.addEventListener("htmx:responseError", function (event) {
    show(event.detail.elt, problemOf(event.detail.xhr));
  });

  document.addEventListener("htmx:sendError", function (event) {
    show(event.detail.elt, problemOf(null));
  });
})();
