"""Concurrent changes to the queue tree (new-user trial 16, F3 / F4 / F5 / F13): the rules that read several
queues (children's quotas within the parent's, one quota row per queue and flavor, no cycle, closed only once
idle) hold whatever the timing, because each such write holds the queue tree's lock (services.lock_queue_tree)
from its check to its commit, and a submission holds it shared.

The PostgreSQL tests are ordered, not raced: a first change runs in a thread and stops before its commit; the
second starts on its own connection, and the first commits only once the second waits on the lock (seen in
pg_locks) or has ended. Without the lock the second reads the first's old rows and passes its check."""
from __future__ import annotations

import pytest

from tests.api.helpers_api import at_once, ordered

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def subqueues(cluster):
    """c0 and c1 under alpha (H100 quota 16), each with an H100 quota 0 / limit none."""
    from gpuplatform import services
    from gpuplatform.models import Team

    team = Team.objects.get(name="alpha")
    return [services.create_queue(f"c{i}", parent="alpha", team=team, quotas={"H100": (0, 0, None)}) for i in range(2)]


@pytest.mark.services
@pytest.mark.postgresql("row and advisory locks: PostgreSQL")
def test_two_siblings_raised_at_once_keep_the_parents_quota(subqueues):
    from gpuplatform import services
    from gpuplatform.models import Quota

    c0, c1 = subqueues
    out = ordered(lambda: services.set_quota(c0, "H100", 0, 10, None),
                   lambda: services.set_quota(c1, "H100", 0, 10, None))
    assert out["waited"], "the second change did not wait for the first"
    assert isinstance(out.get("error"), services.ValidationError), out
    assert "children's quotas would sum to 20, above the parent queue's quota (16)" in str(out["error"].errors)
    assert sorted(Quota.objects.filter(queue__parent__name="alpha").values_list("quota", flat=True)) == [0, 10]


@pytest.mark.services
@pytest.mark.postgresql("row and advisory locks: PostgreSQL")
def test_two_creations_of_one_quota_row_store_one(cluster):
    from gpuplatform import services
    from gpuplatform.models import Event, Quota

    queue = services.create_queue("c0", parent="alpha")
    out = ordered(lambda: services.set_quota(queue, "H100", 0, 1, None, create=True),
                   lambda: services.set_quota(queue, "H100", 0, 2, None, create=True))
    assert isinstance(out.get("error"), services.ValidationError), out
    assert out["error"].errors == {"flavor": "queue c0 already has a H100 quota; change it with PUT/PATCH and If-Match"}
    assert list(Quota.objects.filter(queue=queue).values_list("quota", flat=True)) == [1]
    assert Event.objects.filter(kind="quota_changed", queue=queue).count() == 1


@pytest.mark.services
@pytest.mark.postgresql("row and advisory locks: PostgreSQL")
def test_a_close_during_a_submission_waits_and_stays_closing(subqueues):
    from gpuplatform import services
    from gpuplatform.models import Event, Job, Queue, Team

    c0 = subqueues[0]
    out = ordered(lambda: services.submit_job(team=Team.objects.get(name="alpha"), queue=c0, name="race",
                                               command=["sleep", "1"],
                                               roles=[{"name": "w", "tasks": 1, "gpus_per_task": 0, "cpu_milli": 100}]),
                   lambda: services.update_queue(Queue.objects.get(pk=c0.pk), state="closed"))
    assert out["waited"] and "error" not in out, out
    assert Queue.objects.get(pk=c0.pk).state == "closing"
    assert Job.objects.filter(queue=c0, state="pending").count() == 1
    assert not Event.objects.filter(kind="queue_closed", queue=c0).exists()


@pytest.mark.services
@pytest.mark.postgresql("row and advisory locks: PostgreSQL")
def test_a_submission_during_a_close_is_refused(subqueues):
    from gpuplatform import services
    from gpuplatform.models import Job, Queue, Team

    c0 = subqueues[0]
    out = ordered(lambda: services.update_queue(Queue.objects.get(pk=c0.pk), state="closed"),
                   lambda: services.submit_job(team=Team.objects.get(name="alpha"), queue=c0, name="late",
                                               command=["sleep", "1"],
                                               roles=[{"name": "w", "tasks": 1, "gpus_per_task": 0, "cpu_milli": 100}]))
    assert isinstance(out.get("error"), services.ValidationError), out
    assert "queue" in out["error"].errors and "closed" in out["error"].errors["queue"]
    assert Queue.objects.get(pk=c0.pk).state == "closed" and not Job.objects.filter(queue=c0).exists()


@pytest.mark.services
@pytest.mark.postgresql("row and advisory locks: PostgreSQL")
def test_two_opposite_moves_at_once_answer_the_cycle_not_an_outage(subqueues, admin):
    """Through the API (its If-Match row lock first): the second move is the cycle's 400; no deadlock, no 503."""
    from gpuplatform.models import Queue

    answers = []
    for rnd in range(3):
        for name in (f"m{rnd}a", f"m{rnd}b"):
            assert admin.post("/api/v1/queues/", {"name": name, "parent": "c0"}, format="json").status_code == 201
        a, b = f"m{rnd}a", f"m{rnd}b"
        got = at_once([lambda x=x, y=y: admin.patch(f"/api/v1/queues/{x}/", {"parent": y}, format="json",
                                                    HTTP_IF_MATCH="*") for x, y in ((a, b), (b, a))])
        codes = sorted(r.status_code for r in got)
        assert codes == [200, 400], [(r.status_code, r.content) for r in got]
        refused = next(r for r in got if r.status_code == 400).json()
        assert "would create a cycle" in refused["parent"][0], refused
        parents = dict(Queue.objects.filter(name__in=(a, b)).values_list("name", "parent__name"))
        assert sorted(parents.values()).count("c0") == 1  # one moved under the other, no loop
        answers.append(codes)
    assert len(answers) == 3


def test_a_tree_already_over_its_parents_quota_takes_changes_toward_the_rule(subqueues):
    """A tree that breaks the children's-quotas rule (rows written before the lock, or by hand) is not frozen: a
    cut, an unchanged value and a new queue with quota 0 are taken; a raise is still refused."""
    from gpuplatform import services
    from gpuplatform.models import Quota

    c0, c1 = subqueues
    Quota.objects.filter(queue__in=(c0, c1)).update(quota=10)  # 20 under alpha's 16: what the race stored
    services.set_quota(c0, "H100", 0, 8, None)  # a cut: 18, still above, toward the rule
    services.set_quota(c0, "H100", 0, 8, 16)  # its quota unchanged (the limit changes)
    services.create_queue("c2", parent="alpha", quotas={"H100": (0, 0, None)})
    with pytest.raises(services.ValidationError, match="children's quotas would sum to 19, above the parent"):
        services.set_quota(c1, "H100", 0, 11, None)
    with pytest.raises(services.ValidationError, match="children's quotas would sum to 19"):
        services.create_queue("c3", parent="alpha", quotas={"H100": (0, 1, None)})
    assert sorted(Quota.objects.filter(queue__parent__name="alpha").values_list("quota", flat=True)) == [0, 8, 10]


def test_a_parent_below_its_childrens_sum_may_be_raised_toward_it(subqueues):
    from gpuplatform import services
    from gpuplatform.models import Queue

    c0, _ = subqueues
    services.set_quota(c0, "H100", 0, 10, None)
    alpha = Queue.objects.get(name="alpha")
    from gpuplatform.models import Quota

    Quota.objects.filter(queue=alpha).update(quota=6)  # below its children's 10
    services.set_quota(alpha, "H100", 4, 8, 32)  # raised toward 10: taken
    with pytest.raises(services.ValidationError, match=r"quota \(7\) is below the sum of the children's quotas \(10\)"):
        services.set_quota(alpha, "H100", 4, 7, 32)


@pytest.fixture
def closing_parent(cluster):
    """p (inner, under alpha, closing: its leaf l still has pending job j) and x (a leaf under alpha, pending job k)."""
    from gpuplatform import services
    from gpuplatform.models import Queue, Team

    team = Team.objects.get(name="alpha")
    services.create_queue("p", parent="alpha")
    leaf, x = services.create_queue("l", parent="p", team=team), services.create_queue("x", parent="alpha", team=team)
    roles = [{"name": "w", "tasks": 1, "gpus_per_task": 0, "cpu_milli": 100}]
    j = services.submit_job(team=team, queue=leaf, name="j", command=["sleep", "1"], roles=roles)
    services.submit_job(team=team, queue=x, name="k", command=["sleep", "1"], roles=roles)
    services.update_queue(Queue.objects.get(name="p"), state="closed")
    assert Queue.objects.get(name="p").state == "closing"
    return j


@pytest.mark.services
@pytest.mark.postgresql("row and advisory locks: PostgreSQL")
def test_a_move_under_a_closing_queue_while_its_last_job_ends_keeps_it_closing(closing_parent):
    """New-user trial 16b, F6: the close of a closing queue (its last job cancelled) read the tree without the move
    under way, and the queue ended closed with the moved queue's pending job below it."""
    from gpuplatform import services
    from gpuplatform.models import Event, Job, Queue

    out = ordered(lambda: services.update_queue(Queue.objects.get(name="x"), parent="p"),
                   lambda: services.cancel_job(Job.objects.get(pk=closing_parent.pk), reason="done"))
    assert out["waited"] and "error" not in out, out
    assert Queue.objects.get(name="p").state == "closing" and Queue.objects.get(name="x").parent.name == "p"
    assert not Event.objects.filter(kind="queue_closed").exists()


@pytest.mark.services
@pytest.mark.postgresql("row and advisory locks: PostgreSQL")
def test_a_move_under_a_queue_closed_meanwhile_is_refused(closing_parent):
    from gpuplatform import services
    from gpuplatform.models import Job, Queue

    out = ordered(lambda: services.cancel_job(Job.objects.get(pk=closing_parent.pk), reason="done"),
                   lambda: services.update_queue(Queue.objects.get(name="x"), parent="p"))
    assert isinstance(out.get("error"), services.ValidationError), out
    assert "is closed" in out["error"].errors["parent"]
    assert Queue.objects.get(name="p").state == "closed" and Queue.objects.get(name="x").parent.name == "alpha"


@pytest.mark.services
@pytest.mark.postgresql("row and advisory locks: PostgreSQL")
def test_a_reopen_while_the_last_job_ends_writes_no_close(closing_parent):
    """New-user trial 16b, F4: the queue stayed open but a queue_closed Event was written after the reopen."""
    from gpuplatform import services
    from gpuplatform.models import Event, Job, Queue

    out = ordered(lambda: services.update_queue(Queue.objects.get(name="p"), state="open"),
                   lambda: services.cancel_job(Job.objects.get(pk=closing_parent.pk), reason="done"))
    assert "error" not in out, out
    assert Queue.objects.get(name="p").state == "open" and not Event.objects.filter(kind="queue_closed").exists()


# --- new-user trial 16b, F1-F3: one name at a time (scheduling.locks.lock_name) ----------------------------------

@pytest.mark.services
@pytest.mark.postgresql("advisory locks: PostgreSQL")
def test_two_teams_of_one_name_at_once_answer_one_201_and_the_rules_400(cluster):
    from gpuplatform import services
    from gpuplatform.models import Team

    out = ordered(lambda: services.create_team("Same"), lambda: services.create_team("Same"))
    assert out["waited"] and isinstance(out.get("error"), services.ValidationError), out
    assert out["error"].errors["name"].startswith("a team named 'Same' (slug 'same') already exists")
    assert Team.objects.filter(name="Same").count() == 1


@pytest.mark.services
@pytest.mark.postgresql("advisory locks: PostgreSQL")
def test_one_membership_added_and_removed_twice_at_once_changes_once(users):
    from gpuplatform import services
    from gpuplatform.models import Event, Membership, Team

    team, user = Team.objects.get(name="beta"), users["viewer"]
    out = ordered(lambda: services.add_member(team, user, "member"), lambda: services.add_member(team, user, "member"))
    assert out["waited"] and out["result"].was_added is False, out
    assert Event.objects.filter(kind="member_added", data__user=str(user), data__team="beta").count() == 1
    row = Membership.objects.get(team=team, user=user)
    out = ordered(lambda: services.remove_member(Membership.objects.get(pk=row.pk)),
                   lambda: services.remove_member(row))
    assert out["waited"] and out["result"] is False, out
    assert Event.objects.filter(kind="member_removed", data__user=str(user), data__team="beta").count() == 1


@pytest.mark.services
@pytest.mark.postgresql("advisory locks: PostgreSQL")
def test_retries_with_one_idempotency_key_sent_at_once_all_get_the_first_answer(admin):
    """Ten creations of one queue with one key at once: one 201 and nine replays of it (1-2 of 10 read 400
    'already exists': their handler ran after the first committed, before the key's row was read)."""
    from gpuplatform.models import Queue

    got = at_once([lambda: admin.post("/api/v1/queues/", {"name": "idem", "parent": "alpha"}, format="json",
                                      HTTP_IDEMPOTENCY_KEY="queue-idem")] * 10)
    assert sorted((r.status_code, r.get("Idempotent-Replayed", "")) for r in got) == [(201, "")] + [(201, "true")] * 9, \
        [(r.status_code, r.content) for r in got]
    assert len({r.json()["id"] for r in got}) == 1 and Queue.objects.filter(name="idem").count() == 1
