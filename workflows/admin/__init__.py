from workflows.admin import definitions  # noqa: F401  (registers the definition admins)
from workflows.admin import tasks  # noqa: F401  (registers the task admin)
