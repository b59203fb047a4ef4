"""The queries' named SQL: ``.sql`` files beside this module, read with the engine's loader
(``sql.load("ops", QUERIES_SQL_DIR)``: ``-- name:`` headers, status values from the models'
TextChoices). They ship with the package as its data files."""

from pathlib import Path

QUERIES_SQL_DIR = Path(__file__).resolve().parent
