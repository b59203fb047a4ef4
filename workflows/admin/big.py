"""Change lists over tables that grow with every run (runs, commands, tasks): what keeps them
fast at a million rows and more (``bench/bigtables.py`` measures the run list).

- No second count: ``show_full_result_count = False`` (Django counts the whole table besides
  the filtered one otherwise).
- An unfiltered list's row count is PostgreSQL's estimate (``pg_class.reltuples``, kept by
  autovacuum's ANALYZE) once the table is past ``ESTIMATE_FROM`` rows; a filtered list, and a
  small table, is counted exactly.
- Filters whose choices would be a ``SELECT DISTINCT`` over the big table take them from the
  small table that defines them instead: definitions and scopes from the stored revisions.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property
from django.utils.translation import gettext_lazy as _

from workflows.models import DefinitionVersion

# below this many rows (as PostgreSQL estimates them) an unfiltered list is counted exactly
ESTIMATE_FROM = 100_000


class EstimatedCountPaginator(Paginator):
    """Counts a filtered list exactly; an unfiltered one over a big table by the planner's
    estimate of the table's rows (a count of a million rows reads the whole table)."""

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if isinstance(queryset, QuerySet) and not queryset.query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)",
                    [connection.ops.quote_name(queryset.model._meta.db_table)],
                )
                row = cursor.fetchone()
            estimate = int(row[0]) if row and row[0] is not None else -1
            if estimate >= ESTIMATE_FROM:
                return estimate
        return super().count


class BigTableAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Change-list settings for a table that grows with every run."""

    show_full_result_count = False
    paginator = EstimatedCountPaginator


class _FromRevisions(admin.SimpleListFilter):
    """A filter on a run column whose choices are read from the stored revisions (a handful
    of rows) rather than a DISTINCT over every run."""

    column = ""
    lookup = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = DefinitionVersion.objects.order_by(self.column).values_list(self.column, flat=True).distinct()
        return [(value, value) for value in values]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.lookup: value}) if value else queryset


class DefinitionFilter(_FromRevisions):
    title = _("definition id")
    parameter_name = "definition_id"
    column = "definition_id"
    lookup = "definition_id"


class ScopeFilter(_FromRevisions):
    title = _("scope")
    parameter_name = "scope"
    column = "scope"
    lookup = "scope"
