"""New-user trial 22, F3: the what-if answer says why each job you see starts earlier or later (`why`: the cause,
the job it is about, its words), whose jobs its evictions stop and for whom (`queue`, `beneficiary_queue`, `cause`:
for one of the changes' jobs or a knock-on, `text`), and the evictions the change avoids; never another team's job's
id or name to a member (access.visible_queues' rule, as hidden_queues / hidden_evictions)."""
from __future__ import annotations

from gpuplatform.models import Job
from tests.api.test_forecast_api import URL, busy, by_name  # noqa: F401 (busy: a fixture)

PROBE = {"changes": [{"kind": "submit", "id": "probe", "queue": "beta", "tasks": 1, "gpus_per_task": 8,
                      "time_limit": 900}]}


def test_a_cancel_makes_the_waiting_job_start_now_and_says_whose_gpus_it_takes(busy, admin):
    run0 = Job.objects.get(name="run0")
    answer = admin.post(URL, {"changes": [{"kind": "cancel", "job": run0.pk}]}, format="json").json()
    jobs = by_name(answer)
    for job in jobs.values():  # a job that does not move has no why; every one that moves has one
        if not job["hypothetical"]:
            assert (job["why"] is None) == (job["start_change_s"] == 0), job
    why = jobs["alpha-wait"]["why"]
    assert jobs["alpha-wait"]["start_change_s"] < 0
    assert (why["moved"], why["cause"], why["job"]) == ("earlier", "cancelled", run0.pk)
    assert f"job {run0.pk} (run0)" in why["text"] and "cancels" in why["text"]


def test_evictions_for_the_submission_name_queues_for_an_admin_and_are_counted_for_a_member(busy, admin, client_for):
    answer = admin.post(URL, PROBE, format="json").json()
    mine = [e for e in answer["evictions"] if e["beneficiary"] == "probe"]
    assert mine, answer["evictions"]
    for e in mine:
        victim = Job.objects.get(pk=e["job"])
        assert (e["queue"], e["beneficiary_queue"], e["cause"]) == ("alpha", "beta", "for_change")
        assert e["text"] == f"job {victim.pk} ({victim.name}) is evicted (reclaim) for your job 'probe', one of the " \
                            f"changes' jobs"
    # beta's member: alpha's jobs are another team's: not listed, counted, and counted as made for its own job
    other = client_for("other").post(URL, PROBE, format="json").json()
    assert other["evictions"] == [] and other["hidden_evictions"] == len(answer["evictions"])
    assert other["hidden_evictions_for_change"] == len(mine)
    assert other["hidden_avoided_evictions"] == len(answer["avoided_evictions"])


def test_a_members_why_never_names_another_teams_job(busy, client_for, admin, monkeypatch):
    """(The forecast's answer stubbed:) the member's job alpha-wait starts later because beta-wait takes its GPUs,
    and is evicted as a knock-on for beta-wait, which the forecast without the change evicts instead: the member
    reads "a job of another team" and nulls, never beta-wait's id or name; an admin reads them named."""
    import scheduler.forecast.whatif as whatif
    from scheduler.forecast.whatif import EvictionWhy, Why

    real = whatif.what_if
    own, other = busy["own"].pk, busy["other"].pk

    def moved(snapshot, changes, estimate, **kw):
        out = real(snapshot, changes, estimate, **kw)
        out.why[own] = Why("later", "taken", other, out.now + 600.0)
        out.evictions.append((out.now, own, "reclaim", other))
        out.eviction_why.append(EvictionWhy("knock_on", (other,)))
        return out

    monkeypatch.setattr(whatif, "what_if", moved)
    noop = {"changes": [{"kind": "set_priority", "job": busy["own"].pk,
                         "priority": busy["own"].priority}]}  # changes nothing
    answer = client_for("member").post(URL, noop, format="json").json()
    why = by_name(answer)["alpha-wait"]["why"]
    assert (why["moved"], why["cause"], why["job"]) == ("later", "taken", None)
    assert why["text"] == "starts later: a job of another team takes the GPUs it would start on in 10 min"
    [ev] = answer["evictions"]
    assert (ev["job"], ev["queue"], ev["beneficiary"], ev["beneficiary_queue"], ev["cause"], ev["instead"]) == (
        own, "alpha", None, None, "knock_on", [])
    assert "beta-wait" not in str(answer) and str(other) not in [str(ev["beneficiary"]), str(why["job"])]
    assert ev["text"] == (f"job {own} (alpha-wait) is evicted (reclaim) for a job of another team, a knock-on of the "
                          f"schedule the change moves; without the change a job of another team is evicted instead")
    answer = admin.post(URL, noop, format="json").json()
    why = by_name(answer)["alpha-wait"]["why"]
    assert why["job"] == other and f"job {other} (beta-wait) takes" in why["text"]
    [ev] = answer["evictions"]
    assert (ev["beneficiary"], ev["beneficiary_queue"], ev["instead"]) == (other, "beta", [other])
