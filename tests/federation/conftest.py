"""Federation test world: the manager's teams, queues and users (tests/api/conftest.py's small world) and
two member clusters answered by FakeMember (tests/federation/fakes.py)."""
from __future__ import annotations

import pytest

from tests.api.conftest import _fast_and_fresh, client_for, cluster, users  # noqa: F401  (fixtures)
from tests.federation.fakes import FakeMember


@pytest.fixture
def members(cluster, settings):  # noqa: F811
    """Two member clusters registered at the manager ("east", "west") and their fakes; this instance is the
    manager (FEDERATION_ROLE = "manager": only a manager takes federated jobs)."""
    from gpuplatform.federation import manager

    settings.FEDERATION_ROLE = "manager"

    fakes = {"east": FakeMember("east"), "west": FakeMember("west")}
    for name in fakes:
        manager.register_cluster(name=name, api_url=f"http://{name}.test:8000", token=f"tok-{name}",
                                 labels={"region": name})
    return fakes


@pytest.fixture
def factory(members):
    return lambda c: members[c.name]
