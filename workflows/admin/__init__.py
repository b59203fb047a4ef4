from workflows.admin import (
    bulk,  # noqa: F401  (registers the bulk operation admins)
    definitions,  # noqa: F401  (registers the definition admins)
    runs,  # noqa: F401  (registers the run and command admins)
    tasks,  # noqa: F401  (registers the task admin)
    webhooks,  # noqa: F401  (registers the webhook subscription and delivery admins)
)
