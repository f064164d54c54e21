"""New-user trial 25 (h, 3): the admin's quota page refuses a limit set below the stored quota on the limit (the
field changed, not the untouched quota; a quota raised above the limit stays on the quota), and the page shown
again is titled with the row as stored, not with the refused values."""
from __future__ import annotations

import html
import re

import pytest

from gpuplatform import services
from gpuplatform.models import Node, Quota

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(admin_client, cluster):
    return admin_client


def _field_errors(page: str, field: str) -> str:
    """The error list of the admin form row of `field` ("" when the row has none)."""
    row = re.search(rf'<div class="form-row[^"]*field-{field}[^"]*">(.*?)</div>\s*</div>', page, re.S)
    assert row, field
    return html.unescape(row.group(1)) if "errorlist" in row.group(1) else ""


def _quota_without_limit():
    quota = Quota.objects.get(queue__name="alpha")
    Quota.objects.filter(pk=quota.pk).update(limit=None)
    quota.refresh_from_db()
    return quota


def test_a_limit_below_the_quota_is_the_limits_error_and_the_title_is_the_stored_row(staff):
    quota = _quota_without_limit()
    stored = str(quota)
    r = staff.post(f"/admin/gpuplatform/quota/{quota.pk}/change/", {
        "guarantee": quota.guarantee, "quota": quota.quota, "limit": 5, "version": services.quota_version(quota)})
    page = r.content.decode()
    assert r.status_code == 200
    assert f"quota ({quota.quota}) must not exceed limit (5)" in _field_errors(page, "limit")
    assert _field_errors(page, "quota") == ""
    title = html.unescape(re.search(r"<title>(.*?)</title>", page, re.S).group(1))
    assert title.startswith(f"Error: {stored} |"), title
    assert f"<h2>{html.escape(stored)}</h2>" in page and f"/{quota.quota}/5" not in html.unescape(page)
    assert Quota.objects.get(pk=quota.pk).limit is None


def test_a_quota_raised_above_the_limit_stays_the_quotas_error(staff):
    quota = Quota.objects.get(queue__name="alpha")
    Quota.objects.filter(pk=quota.pk).update(guarantee=0, quota=2, limit=4)
    quota.refresh_from_db()
    r = staff.post(f"/admin/gpuplatform/quota/{quota.pk}/change/", {
        "guarantee": 0, "quota": 6, "limit": 4, "version": services.quota_version(quota)})
    page = r.content.decode()
    assert "quota (6) must not exceed limit (4)" in _field_errors(page, "quota")
    assert _field_errors(page, "limit") == ""


def test_the_node_page_shown_again_is_titled_with_the_stored_name(staff):
    node = Node.objects.get(name="n1")
    r = staff.post(f"/admin/gpuplatform/node/{node.pk}/change/", {"name": "renamed", "labels": "[1, 2]",
                                                                 "gpus-TOTAL_FORMS": 0, "gpus-INITIAL_FORMS": 0})
    page = r.content.decode()
    assert r.status_code == 200 and "<h2>n1</h2>" in page and "<h2>renamed</h2>" not in page
