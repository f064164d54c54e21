"""A cancel is diagnosed `cancelled`, not `platform` (new-user trial 23: a cancelled attempt read
{'category': 'platform', 'summary': 'cancelled: requested by demo'}, the category of an exited node agent, a real
platform fault). The rule stays `platform:cancelled` (the platform's own event), the action `cancel_retries`;
no admin rule may claim the category. docs/diagnosis.md, "Categories"."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.api.serializers.jobs import JobSerializer
from gpuplatform.diagnosis import engine
from gpuplatform.models import Attempt
from tests.platform.conftest import alpha, cluster, submit  # noqa: F401  (fixtures)
from tests.platform.test_execution import EIGHT, agents, at, bind, report, start_all, tasks_of  # noqa: F401


def test_a_cancel_is_its_own_category_not_a_platform_fault():
    tasks = [engine.TaskEvidence("worker[0]", "n1", 10.0, signal=15, own_end=False, log="Traceback: KeyboardInterrupt")]
    none = engine.RuleSet(version="", rules=())
    d = engine.diagnose(tasks, rules=none, platform={"cause": "cancelled", "text": "requested by demo"})
    assert (d.category, d.rule, d.action, d.summary) == (
        "cancelled", "platform:cancelled", "cancel_retries", "cancelled: requested by demo")
    assert "cancelled" in engine.CATEGORIES and "cancelled" not in engine.NODE_FAULT_CATEGORIES
    lost = engine.diagnose(tasks, rules=none, platform={"cause": "agent_exited", "text": "n1", "node": "n1"})
    assert lost.category == "platform"  # the real platform fault keeps its category


def test_a_cancelled_attempt_is_recorded_cancelled(submit, agents):
    job = submit("gang", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    start_all(job)
    services.cancel_job(job, reason="requested by demo", at=at(100))
    assert report(tasks_of(job)[0], "exited", 103, signal=15) == (True, "")
    a = Attempt.objects.get(job=job, number=0)
    assert (a.outcome, a.failed, a.category) == ("cancelled", False, "cancelled")
    assert (a.diagnosis["category"], a.diagnosis["rule"]) == ("cancelled", "platform:cancelled")


@pytest.mark.parametrize("category", ["cancelled", "platform"])
def test_no_rule_may_claim_a_platform_only_category(category):
    entry = {"id": "mine", "category": category, "pattern": "x", "source": "an admin's rule for the test"}
    with pytest.raises(engine.RuleError) as err:
        engine.parse_rules({"version": "1", "rules": [entry]})
    assert err.value.field == "rules[0].category"
    assert err.value.message.startswith("category must be one of cuda_oom, ")  # no Python list in the message
    assert category not in err.value.message.split("one of ")[1].split(", ")


def test_a_health_rule_cannot_be_a_cancel():
    entry = {"id": "h", "signal": "xid", "op": "in", "value": [79], "action": "record", "category": "cancelled",
             "source": "an admin's health rule for the test"}
    with pytest.raises(engine.RuleError) as err:
        engine.parse_health_rules({"version": "1", "rules": [entry]})
    assert err.value.field == "rules[0].category"
    assert "cancelled" not in err.value.message.split("one of ")[1].split(", ")


def test_the_apis_help_text_names_every_category():
    help_text = str(JobSerializer().fields["attempts"].help_text)
    missing = [c for c in engine.CATEGORIES if c not in help_text]
    assert not missing, missing
