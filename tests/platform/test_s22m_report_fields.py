"""Trial 22, F4, the server's side: a report's field the server does not know is refused, never dropped, as every
body of the API is (api.serializers.base.StrictFieldsMixin): a 400 naming the field (flattened, tasks[i].<field>) and
the fields it takes. That is the answer an agent reads to resend a lost report without `cause` to a server before it
(agent.runner.refused_fields; tests/agent/test_s22m_cause_skew.py)."""
from __future__ import annotations

import pytest

from gpuplatform.agent.runner import refused_fields
from tests.platform.test_execution import (  # noqa: F401  (agents, clients: fixtures)
    EIGHT, agents, bind, clients, tasks_of,
)

pytestmark = pytest.mark.django_db


def test_the_server_names_an_unknown_report_field_and_what_it_takes(clients, submit):
    job = submit("skew", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    task = tasks_of(job)[0]
    answer = clients["agent"].post("/api/v1/nodes/n0/reports/", {"tasks": [
        {"task": task.pk, "attempt": 0, "event": "lost", "message": "x", "cause": "agent_exited", "reason": "y"}]},
        format="json")
    assert answer.status_code == 400, answer.content
    body = answer.json()
    assert list(body) == ["tasks[0].reason"], body
    assert body["tasks[0].reason"][0].startswith("unknown field (not dropped: the request is refused); accepted "
                                                 "fields: task, attempt, event, pid, exit_code, signal, message, cause")
    assert refused_fields(body) == {"reason"}  # what the agent reads: not `cause`, so not sent again
