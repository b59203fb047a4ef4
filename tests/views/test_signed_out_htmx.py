"""A signed-out htmx request is sent to the sign-in page whole (issue #30).

The designer's live check and the dashboard's refresh are htmx requests; answered with a 302
to the sign-in page, htmx followed it and swapped the sign-in form into the graph's or the
tiles' place. ``page_requires`` now answers them with ``HX-Redirect`` (the browser loads the
sign-in page), coming back to the page the user was on, never to the fragment's endpoint.
"""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def test_a_signed_out_live_check_redirects_the_page_to_sign_in() -> None:
    response = Client().post(
        "/designer/check/",
        {"text": "definitionId: x", "scope": "default"},
        HTTP_HX_CURRENT_URL="http://testserver/designer/new/?template=approval",
        **HTMX,
    )

    assert response.status_code == 200
    assert response["HX-Redirect"] == "/accounts/login/?next=/designer/new/%3Ftemplate%3Dapproval"
    assert b"<form" not in response.content  # nothing to swap into the graph's place


def test_a_signed_out_dashboard_refresh_redirects_the_page_to_sign_in() -> None:
    response = Client().get("/ops/", HTTP_HX_CURRENT_URL="http://testserver/ops/", **HTMX)

    assert response.status_code == 200
    assert response["HX-Redirect"] == "/accounts/login/?next=/ops/"


def test_a_current_url_of_another_site_is_not_where_sign_in_returns() -> None:
    response = Client().get("/designer/", HTTP_HX_CURRENT_URL="https://elsewhere.example/phish", **HTMX)

    assert response["HX-Redirect"] == "/accounts/login/?next=/designer/"


def test_a_plain_request_still_gets_the_redirect() -> None:
    response = Client().get("/designer/")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/designer/"
    assert "HX-Redirect" not in response
