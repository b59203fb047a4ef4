from workflows.admin import definitions  # noqa: F401  (registers the definition admins)
from workflows.admin import tasks  # noqa: F401  (registers the task admin)
from workflows.admin import runs  # noqa: F401  (registers the run and command admins)
