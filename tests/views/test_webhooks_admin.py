"""The webhook admin: a subscription made or rotated shows its secret once, bad URLs are form
errors, the delivery log is read-only and *Redeliver* makes one more attempt."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.engine import documents
from workflows import definitions, operations
from workflows.engine import executor, outbox
from workflows.models import OutboxIntent, WebhookAttempt, WebhookSubscription

pytestmark = pytest.mark.django_db(transaction=True)

SUBSCRIPTIONS = "/admin/workflows/webhooksubscription/"
DELIVERIES = "/admin/workflows/webhookdelivery/"


@pytest.fixture
def admin_client_() -> Client:
    user = get_user_model().objects.create_superuser("root", password="root")
    client = Client()
    client.force_login(user)
    return client


def test_adding_a_subscription_shows_its_secret_once(admin_client_: Client) -> None:
    page = admin_client_.post(
        f"{SUBSCRIPTIONS}add/",
        {"url": "https://hooks.example.com/in", "events": ["run.completed", "task.created"], "active": "on"},
    )
    assert page.status_code == 200, page.content
    subscription = WebhookSubscription.objects.get()
    assert subscription.secret in page.content.decode() and "no-store" in page["Cache-Control"]
    assert subscription.events == ["run.completed", "task.created"]
    change = admin_client_.get(f"{SUBSCRIPTIONS}{subscription.pk}/change/")
    assert change.status_code == 200 and subscription.secret not in change.content.decode()

    rotated = admin_client_.post(SUBSCRIPTIONS, {"action": "rotate_secret", "_selected_action": [subscription.pk]})
    subscription.refresh_from_db()
    assert rotated.status_code == 200 and subscription.secret in rotated.content.decode()
    assert subscription.previous_secret and subscription.previous_secret not in rotated.content.decode()


@pytest.mark.parametrize("url", ["http://hooks.example.com/in", "https://192.168.1.10/in"])
def test_a_bad_url_is_a_form_error_and_nothing_is_made(admin_client_: Client, url: str) -> None:
    page = admin_client_.post(f"{SUBSCRIPTIONS}add/", {"url": url, "events": ["run.completed"], "active": "on"})
    assert page.status_code == 200 and page.context["adminform"].form.errors["url"]
    assert "192.168.1.10" not in str(page.context["adminform"].form.errors)
    assert not WebhookSubscription.objects.exists()


def test_the_delivery_log_is_read_only_and_redeliver_tries_again(admin_client_: Client) -> None:
    ref = definitions.load(scope="default", text=documents.APPROVAL, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")
    operations.webhook_create(url="https://hooks.invalid/in", events=["run.started"])
    operations.start(definition_id="approval", payload={"number": "N-1", "total": 10})
    executor.drain(budget_seconds=10)
    intent = OutboxIntent.objects.get(kind="EVENT")
    assert outbox.deliver(intent.pk) == "DEAD"

    listed = admin_client_.get(DELIVERIES)
    assert listed.status_code == 200 and "run.started" in listed.content.decode()
    detail = admin_client_.get(f"{DELIVERIES}{intent.pk}/change/")
    assert detail.status_code == 200 and "does not resolve" in detail.content.decode()
    assert admin_client_.get(f"{DELIVERIES}add/").status_code == 403

    admin_client_.post(DELIVERIES, {"action": "redeliver", "_selected_action": [intent.pk]})
    intent.refresh_from_db()
    assert intent.status == "PENDING"
    assert outbox.deliver(intent.pk) == "DEAD"
    assert WebhookAttempt.objects.filter(intent=intent).count() == 2
