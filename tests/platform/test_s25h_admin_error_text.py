"""New-user trial 25 (h, 2): an admin form shows a refusal as plain text, never the repr of DRF's ErrorDetail
lists ("labels: [ErrorDetail(string='Expected a dictionary of items but got type \\"list\\".', code='not_a_dict')]"
on a node's page)."""
from __future__ import annotations

import html

import pytest
from django import forms
from rest_framework.exceptions import ErrorDetail

from gpuplatform.inputs import TextRuleForm, error_text
from gpuplatform.models import Node


@pytest.fixture
def staff(admin_client, cluster):
    return admin_client


def _errors(page: str) -> str:
    return html.unescape(page)


@pytest.mark.django_db
@pytest.mark.parametrize("bad, words", [
    ("[1, 2]", "labels must be a JSON object of name: value"),
    ('"str"', "labels must be a JSON object of name: value"),
    ('{"a": {"b": 1}}', "labels: a: Not a valid string."),
    ('{"": "x"}', "labels: label names must be 1-200 characters without NUL"),
])
def test_the_node_page_words_a_labels_refusal_as_text(staff, bad, words):
    node = Node.objects.get(name="n1")
    r = staff.post(f"/admin/gpuplatform/node/{node.pk}/change/", {"name": "n1", "labels": bad,
                                                                 "gpus-TOTAL_FORMS": 0, "gpus-INITIAL_FORMS": 0})
    page = _errors(r.content.decode())
    assert r.status_code == 200 and words in page, page[page.find("errorlist"):][:400]
    assert "ErrorDetail" not in page


def test_error_text_of_drf_details():
    assert error_text([ErrorDetail("one", code="x"), ErrorDetail("two", code="y")]) == "one; two"
    assert error_text({"a": [ErrorDetail("bad", code="x")], "non_field_errors": ["top"]}) == "a: bad; top"
    assert error_text("plain") == "plain"


class _Form(TextRuleForm, forms.Form):
    name = forms.CharField()


def test_an_admin_form_adds_a_serializers_errors_as_text():
    """Every admin form has TextRuleForm (admin_services.ServiceAdmin.get_form, the name-rule forms): an error
    added from a serializer's or a service's ErrorDetail list is its text."""
    form = _Form(data={"name": "x"})
    assert form.is_valid()
    form.add_error("name", {"a": [ErrorDetail("Not a valid string.", code="invalid")]})  # a DictField's errors
    form.add_error(None, {"name": [ErrorDetail("taken", code="unique")]})
    assert form.errors["name"] == ["a: Not a valid string.", "taken"]
    form.add_error(None, [ErrorDetail("refused", code="x")])
    assert form.non_field_errors() == ["refused"]
