"""The nodes page lists node names in natural order (m2 before m10 before m100), new-user report 7 F12."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from gpuplatform.models import Node

pytestmark = pytest.mark.django_db


def test_nodes_are_listed_in_natural_order(client):
    for name in ("m10", "m2", "m100", "m0", "m1", "gpu-b", "gpu-a"):
        Node.objects.create(name=name, flavor="P100", gpu_count=1)
    client.force_login(get_user_model().objects.create_user("viewer", password="pw-viewer-123"))
    html = client.get("/nodes/").content.decode()
    names = re.findall(r'<tr data-node="([^"]+)">', html)
    assert names == ["gpu-a", "gpu-b", "m0", "m1", "m2", "m10", "m100"]
