from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from workflows.models.fields import json_field


class DefinitionStatus(models.TextChoices):
    CANDIDATE = "CANDIDATE", _("Candidate")
    PUBLISHING = "PUBLISHING", _("Publishing")
    AVAILABLE = "AVAILABLE", _("Available")
    DEPRECATED = "DEPRECATED", _("Deprecated")
    RETIRED = "RETIRED", _("Retired")


class DefinitionVersion(models.Model):
    """One stored revision of a definition: keyed by (scope, definition id, version)."""

    scope = models.CharField(max_length=255, default="default")
    definition_id = models.CharField(max_length=255)
    version = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, default="DOCUMENT")
    status = models.CharField(max_length=16, choices=DefinitionStatus.choices, default=DefinitionStatus.CANDIDATE)
    contract = models.CharField(max_length=255)
    contract_signals = json_field(null=True, blank=True)  # name -> schema, as declared
    state_schema = json_field(null=True, blank=True)
    start_schema = json_field(null=True, blank=True)
    signal_names = json_field(null=True, blank=True)  # names the plan waits for
    plan_hash = models.CharField(max_length=64)
    format = models.CharField(max_length=8, default="yaml")
    text = models.TextField()
    text_digest = models.CharField(max_length=64)
    packaged = models.BooleanField(default=False)
    activate_on_deploy = models.BooleanField(default=True)
    failure = models.CharField(max_length=64, blank=True, default="")
    # the data lifecycle: ended runs pinned to this version are purged (or archived) this many
    # days after they ended; null follows WORKFLOWS["RETENTION"] (docs/operations.md)
    retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_("Days an ended run of this version is kept; empty: the site's retention setting."),
    )
    source_type = models.CharField(max_length=64, blank=True, default="")
    source_uri = models.CharField(max_length=2048, blank=True, default="")
    source_revision = models.CharField(max_length=255, blank=True, default="")
    source_author = models.CharField(max_length=255, blank=True, default="")
    upload_id = models.CharField(max_length=255, blank=True, default="")
    claim_token = models.UUIDField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    published_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("definition version")
        verbose_name_plural = _("definition versions")
        db_table = "workflow_definitions"
        constraints = [
            models.UniqueConstraint(fields=["scope", "definition_id", "version"], name="workflow_definition_key"),
        ]
        indexes = [models.Index(fields=["definition_id", "scope", "status"], name="workflow_def_by_id")]
        permissions = [
            ("migrate_runs", "Can migrate runs between revisions"),
            ("cancel_runs", "Can cancel runs"),
        ]

    def __str__(self) -> str:
        return f"{self.definition_id} v{self.version} ({self.scope})"


class Activation(models.Model):
    """Which version a start without a version runs in a scope."""

    scope = models.CharField(max_length=255)
    definition_id = models.CharField(max_length=255)
    target_scope = models.CharField(max_length=255)
    version = models.PositiveIntegerField()
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        verbose_name = _("activation")
        verbose_name_plural = _("activations")
        db_table = "workflow_activations"
        constraints = [models.UniqueConstraint(fields=["scope", "definition_id"], name="workflow_activation_key")]

    def __str__(self) -> str:
        return f"{self.scope}/{self.definition_id} -> {self.target_scope} v{self.version}"
