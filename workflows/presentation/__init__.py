"""Presenters: what a page shows, computed from plans and schemas, without requests or responses.

- :mod:`.graph` draws a plan's graph as SVG (the run viewer, the dashboard, the Migrate dialog
  and the designer use it);
- :mod:`.forms` turns a decision's JSON Schema into form fields and posted strings back into a
  payload (the task page).

The views (``workflows.views``, ``designer.views``) handle the request and render templates;
they call these for the parts that do not depend on the request.
"""
