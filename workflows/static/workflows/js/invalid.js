// A form sent back with errors opens at its first marked field. The server marks each field it
// refused (aria-invalid="true", its errors next to it: workflows/tasks/_field.html) and the
// page reloads at its top, where on a phone nothing of the form is in sight. On load, this
// moves the focus to the first marked field (which scrolls it into view) or, when only the
// form's own error box says what went wrong, to that box. Loaded on every page by
// switchyard/assets.html; a page opened at an anchor, or with the focus already placed
// (autofocus), is left alone.
(function () {
  "use strict";

  function focusFirstProblem() {
    if (window.location.hash) return;
    var active = document.activeElement;
    if (active && active !== document.body && active !== document.documentElement) return;
    var target = document.querySelector('form [aria-invalid="true"]');
    if (!target) {
      target = document.querySelector('form .message-error[role="alert"]');
      if (!target) return;
      target.setAttribute("tabindex", "-1");
    }
    target.focus({ preventScroll: true });
    target.scrollIntoView({ block: "center" });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", focusFirstProblem);
  } else {
    focusFirstProblem();
  }
})();
