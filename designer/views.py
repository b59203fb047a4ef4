"""The designer's pages (view definitions capability, ``workflows.access``): the workflow
list, a workflow's revisions, the editor of a new revision with its live graph and problems,
the step form, revision diffs, and Deploy.

htmx endpoints answer fragments: ``check`` (graph or problems, as the text changes), ``cel``
(one expression as it is typed), ``step_form`` / ``step_apply`` (the step form and its write
back into the document). Deploy is a plain form post for users with the deploy definitions
capability; when runs are parked on the revision it replaced it
redirects to the Migrate dialog with that pair selected (the deploy has committed by then).

Reads go through ``workflows.queries`` and ``workflows.definitions``, writes through
``workflows.definitions`` (see ``designer.services``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy as _lazy
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_POST

from designer import services
from designer.forms import STEP_TYPES, TYPE_NAMES, DocumentForm, StepForm
from workflows import access
from workflows.access import Capability, page_requires
from workflows.exceptions import DefinitionError, DefinitionMissing, InvalidArgument, WorkflowError

NOT_YAML = _lazy("fix the document so it reads as YAML first")
STEP_GONE = _lazy("that step is no longer in the document")


def _can_deploy(request: HttpRequest) -> bool:
    return access.has(request.user, Capability.DEPLOY)


def _workflow_or_404(scope: str, definition_id: str) -> services.Workflow:
    try:
        found = services.workflow(scope, definition_id)
    except InvalidArgument:
        found = None
    if found is None:
        raise Http404("no such workflow")
    return found


def _version(value: Any) -> int | None:
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


# --- list and workflow page --------------------------------------------------------------------


@page_requires(Capability.VIEW_DEFINITIONS)
@require_GET
def workflow_list(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "designer/list.html",
        {"workflows": services.workflows(), "templates": services.TEMPLATES, "can_deploy": _can_deploy(request)},
    )


@page_requires(Capability.VIEW_DEFINITIONS)
@require_GET
def workflow_page(request: HttpRequest, scope: str, definition_id: str) -> HttpResponse:
    wf = _workflow_or_404(scope, definition_id)
    target = wf.current_version if wf.current_target_scope == scope else None
    revisions = []
    for revision in reversed(wf.revisions):
        migrate = None
        if revision.parked and target is not None:
            migrate = services.migrate_url(scope, definition_id, revision.version, target)
        revisions.append({"r": revision, "migrate_url": migrate})
    return render(
        request,
        "designer/workflow.html",
        {"wf": wf, "revisions": revisions, "can_deploy": _can_deploy(request)},
    )


# --- the editor --------------------------------------------------------------------------------


def _editor(
    request: HttpRequest,
    *,
    text: str,
    scope: str,
    definition_id: str | None,
    base_version: int | None = None,
    template_slug: str | None = None,
    status: int = 200,
    deploy_problems: list[services.Problem] | None = None,
    deploy_error: str | None = None,
    live: bool = False,
) -> HttpResponse:
    result = services.live_check(text) if live else services.check(text)
    if deploy_problems is not None:
        result.problems = deploy_problems
    context = {
        "text": text,
        "scope": scope,
        "scope_editable": definition_id is None,
        "definition_id": definition_id,
        "base_version": base_version,
        "template": services.template(template_slug) if template_slug else None,
        "templates": services.TEMPLATES,
        "can_deploy": _can_deploy(request),
        "step_types": STEP_TYPES,
        "deploy_error": deploy_error,
        # drawn from a post (a refused deploy, "Check now"): the text is not stored anywhere yet
        "unsaved": request.method == "POST",
        **_check_context(result, scope),
        "outline": services.outline(text),
    }
    return render(request, "designer/editor.html", context, status=status)


def _check_context(result: services.Check, scope: str) -> dict[str, Any]:
    plan = result.plan
    deploys_as = None
    current = None
    if plan is not None:
        try:
            deploys_as = services.next_version(scope, plan.definition_id)
            current = services.current_version(scope, plan.definition_id)
        except InvalidArgument:
            deploys_as = None
    drawn = plan is not None and services.drawable(plan)
    return {
        "scope": scope,
        "result": result,
        "plan": plan,
        "svg": services.graph_svg(plan) if plan is not None and drawn else None,
        "graph_too_large": plan is not None and not drawn,
        "max_graph_steps": services.MAX_GRAPH_STEPS,
        "problem_lines": services.problems_for_lines(result.problems),
        "deploys_as": deploys_as,
        "current_version": current,
    }


@page_requires(Capability.VIEW_DEFINITIONS)
@require_GET
def new(request: HttpRequest) -> HttpResponse:
    slug = request.GET.get("template") or "approval"
    try:
        text = services.template_text(slug)
    except KeyError:
        raise Http404("no such template") from None
    scope = request.GET.get("scope") or "default"
    return _editor(request, text=text, scope=scope, definition_id=None, template_slug=slug)


@page_requires(Capability.VIEW_DEFINITIONS)
@require_GET
def edit(request: HttpRequest, scope: str, definition_id: str) -> HttpResponse:
    wf = _workflow_or_404(scope, definition_id)
    version = _version(request.GET.get("from"))
    if version is None:
        version = wf.current_version if wf.current_target_scope == scope and wf.current_version else None
    if version is None and wf.latest is not None:
        version = wf.latest.version
    try:
        text = services.revision_text(scope, definition_id, version or 0)
    except (DefinitionMissing, ValueError):
        raise Http404("no such revision") from None
    return _editor(request, text=text, scope=scope, definition_id=definition_id, base_version=version)


@page_requires(Capability.VIEW_DEFINITIONS)
@require_POST
def check(request: HttpRequest) -> HttpResponse:
    """The live check: the graph of the text (or its problems). A full page without htmx.

    Bounded (see ``services.live_check``): a user gets LIVE_CHECKS_PER_MINUTE checks a minute
    (then 429 with Retry-After), a document over the size limit is refused unread, compiling
    stops after a few seconds, and the answer lists at most 50 problems and draws at most
    MAX_GRAPH_STEPS steps."""
    # staff_required: a signed-in user, so a primary key
    refusal = services.take_check(int(request.user.pk or 0))
    if refusal is not None:
        response = render(
            request,
            "designer/_check_refused.html",
            {"retry_after": refusal.retry_after},
            status=429,
        )
        response["Retry-After"] = str(refusal.retry_after)
        return response
    form = DocumentForm(request.POST)
    if not form.is_valid():
        return render(request, "designer/_bad_input.html", {"form": form}, status=422)
    text, scope = form.cleaned_data["text"], form.cleaned_data["scope"]
    if not getattr(request, "htmx", False):
        definition_id = request.POST.get("definition_id") or None
        return _editor(
            request,
            text=text,
            scope=scope,
            definition_id=definition_id,
            base_version=_version(request.POST.get("base_version")),
            live=True,
        )
    result = services.live_check(text)
    context = _check_context(result, scope)
    outline = services.outline(text)
    # the step picker's list is refreshed for documents people edit step by step; a bigger one
    # keeps the list it has (the answer stays small)
    context["outline"] = outline if outline is not None and len(outline.steps) <= services.MAX_GRAPH_STEPS else None
    return render(request, "designer/_check.html", context)


@page_requires(Capability.VIEW_DEFINITIONS)
@require_POST
def cel(request: HttpRequest) -> HttpResponse:
    """One CEL expression or template, checked as it is typed (value-free answer)."""
    name = request.POST.get("field", "")
    source = request.POST.get(name, "") if name else ""
    if len(source) > 4000:
        return render(request, "designer/_cel.html", {"problem": _("expression is longer than 4000 characters")})
    if not source.strip():
        return render(request, "designer/_cel.html", {"empty": True})
    variables = request.POST.get("variables", "state")
    if variables not in services.CEL_VARIABLES:
        variables = "state"
    problem = services.check_expression(source, variables=variables, template=request.POST.get("template") == "1")
    return render(
        request,
        "designer/_cel.html",
        {"problem": problem, "variables": ", ".join(services.CEL_VARIABLES[variables])},
    )


# --- the step form -----------------------------------------------------------------------------


def _step_form_context(form: StepForm, *, editing: str | None, **extra: Any) -> dict[str, Any]:
    return {"form": form, "editing": editing, "step_types": STEP_TYPES, **extra}


@page_requires(Capability.VIEW_DEFINITIONS)
@require_POST
def step_form(request: HttpRequest) -> HttpResponse:
    """The step form: ``action=add`` a step of ``step_type``, ``action=edit`` the step ``edit``;
    posted again with another ``step_type`` it redraws for that type, keeping the id."""
    text = request.POST.get("text", "")
    outline = services.outline(text)
    if outline is None:
        return render(request, "designer/_step_refused.html", {"reason": NOT_YAML})
    editing = request.POST.get("edit") if request.POST.get("action") == "edit" else None
    original = None
    if editing:
        original = next((s for s in outline.steps if s.get("id") == editing), None)
        if original is None:
            return render(request, "designer/_step_refused.html", {"reason": STEP_GONE})
    elif request.POST.get("original_id"):
        editing = request.POST.get("original_id")
        original = next((s for s in outline.steps if s.get("id") == editing), None)
    step_type = str(original.get("type")) if original and request.POST.get("action") == "edit" else ""
    step_type = step_type or request.POST.get("step_type") or "human-task"
    if step_type not in TYPE_NAMES:
        step_type = "human-task"
    slots = [s for s in outline.slots if not editing or not s[0].startswith(f"{editing}|")]
    form = StepForm(step_type=step_type, step_ids=outline.ids, slots=slots, original=original)
    if not original and request.POST.get("step_id"):
        form.initial["step_id"] = request.POST["step_id"]
    if editing:
        form.initial["original_id"] = editing
    return render(request, "designer/_step_form.html", _step_form_context(form, editing=editing))


@page_requires(Capability.VIEW_DEFINITIONS)
@require_POST
def step_apply(request: HttpRequest) -> HttpResponse:
    """Write the step form's step into the document; answers the new text for the editor."""
    text = request.POST.get("text", "")
    outline = services.outline(text)
    if outline is None:
        return render(request, "designer/_step_refused.html", {"reason": NOT_YAML})
    editing = request.POST.get("original_id") or None
    original = next((s for s in outline.steps if s.get("id") == editing), None) if editing else None
    if editing and original is None:
        return render(request, "designer/_step_refused.html", {"reason": STEP_GONE})
    step_type = request.POST.get("step_type") or "human-task"
    slots = [s for s in outline.slots if not editing or not s[0].startswith(f"{editing}|")]
    form = StepForm(request.POST, step_type=step_type, step_ids=outline.ids, slots=slots, original=original)
    if not form.is_valid():
        return render(request, "designer/_step_form.html", _step_form_context(form, editing=editing), status=422)
    step = form.to_step()
    try:
        new_text, rewritten = services.apply_step(
            text, step, replace=editing, connect_from=form.cleaned_data.get("connect_from") or None
        )
    except services.EditRefused as refused:
        form.add_error(None, str(refused))
        return render(request, "designer/_step_form.html", _step_form_context(form, editing=editing), status=422)
    return render(
        request,
        "designer/_step_done.html",
        {"step_id": step["id"], "editing": editing, "new_text": new_text, "rewritten": rewritten},
    )


# --- compare -----------------------------------------------------------------------------------


@page_requires(Capability.VIEW_DEFINITIONS)
@require_GET
def compare(request: HttpRequest, scope: str, definition_id: str) -> HttpResponse:
    wf = _workflow_or_404(scope, definition_id)
    versions = [r.version for r in wf.revisions]
    right = _version(request.GET.get("b"))
    left = _version(request.GET.get("a"))
    if right not in versions:
        right = versions[-1]
    if left not in versions:
        earlier = [v for v in versions if v < right]
        left = earlier[-1] if earlier else right
    try:
        left_text = services.revision_text(scope, definition_id, left)
        right_text = services.revision_text(scope, definition_id, right)
    except DefinitionMissing:
        raise Http404("no such revision") from None
    comparison = services.compare(
        left_text,
        right_text,
        left_title=f"{definition_id} version {left}",
        right_title=f"{definition_id} version {right}",
    )
    return render(
        request,
        "designer/compare.html",
        {"wf": wf, "versions": versions, "left": left, "right": right, "c": comparison},
    )


# --- deploy ------------------------------------------------------------------------------------


@page_requires(Capability.DEPLOY)
@require_POST
def deploy(request: HttpRequest) -> HttpResponse:
    """Validate, mint, load, publish and activate; then the Migrate dialog when runs are
    parked on the revision this one replaced, otherwise the workflow's page."""
    form = DocumentForm(request.POST)
    definition_id = request.POST.get("definition_id") or None
    base_version = _version(request.POST.get("base_version"))
    template_slug = request.POST.get("template") or None
    if not form.is_valid():
        return render(request, "designer/_bad_input.html", {"form": form}, status=422)
    text, scope = form.cleaned_data["text"], form.cleaned_data["scope"]
    editor = {
        "text": text,
        "scope": scope,
        "definition_id": definition_id,
        "base_version": base_version,
        "template_slug": template_slug,
    }
    try:
        deployed = services.deploy(scope=scope, text=text, username=request.user.get_username())
    except DefinitionError as error:
        problems = [services.Problem.of(v) for v in error.violations]
        if not problems:
            problems = [services.Problem("", error.code, error.message, None)]
        return _editor(
            request,
            status=422,
            deploy_problems=problems,
            deploy_error=_("Not deployed (%(code)s): %(message)s") % {"code": error.code, "message": error.message},
            **editor,
        )
    except services.UnchangedDocument as unchanged:
        return _editor(
            request,
            status=409,
            deploy_error=_(
                "Nothing deployed: this document is version %(version)s, which scope %(scope)s already runs. "
                "Change it first."
            )
            % {"version": unchanged.version, "scope": scope},
            **editor,
        )
    except WorkflowError as error:
        return _editor(
            request,
            status=409 if error.status == 409 else 422,
            deploy_error=_("Not deployed (%(code)s): %(message)s") % {"code": error.code, "message": error.message},
            **editor,
        )
    messages.success(
        request,
        _(
            "Deployed %(definition)s version %(version)s in scope %(scope)s: published and activated; "
            "new runs start on it."
        )
        % {"definition": deployed.definition_id, "version": deployed.version, "scope": deployed.scope},
    )
    if deployed.opens_migrate and deployed.replaced is not None:
        count = deployed.parked_on_replaced
        messages.info(
            request,
            ngettext(
                "%(count)d run is parked on version %(replaced)s, the version this deploy replaced. Move it to "
                "version %(version)s here, or leave it where it is: nothing moves until you apply.",
                "%(count)d runs are parked on version %(replaced)s, the version this deploy replaced. Move them to "
                "version %(version)s here, or leave them where they are: nothing moves until you apply.",
                count,
            )
            % {"count": count, "replaced": deployed.replaced, "version": deployed.version},
        )
        return HttpResponseRedirect(
            services.migrate_url(deployed.scope, deployed.definition_id, deployed.replaced, deployed.version)
        )
    return HttpResponseRedirect(reverse("switchyard_designer:workflow", args=(deployed.scope, deployed.definition_id)))
