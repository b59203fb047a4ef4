from workflows.admin import definitions  # noqa: F401  (registers the definition admins)
