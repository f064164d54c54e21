"""in_queue_places: the jobs a cycle did not consider (requeue backoff) placed in their queue's order among the ones it
considered (new-user trial 24, F3)."""
from scheduler.core.plugins.quota import in_queue_places


def test_waiting_jobs_stand_before_the_first_later_job_of_their_queue_else_last():
    considered = ["b1", "a2", "b3", "a4"]  # the walk alternated queues a and b
    queue_of = {"a1": "a", "a2": "a", "a3": "a", "a4": "a", "a5": "a", "b1": "b", "b3": "b", "c6": "c"}
    key_of = {j: int(j[1:]) for j in queue_of}  # the queue's order: the number
    waiting = ["a5", "c6", "a3", "a1"]
    assert in_queue_places(considered, waiting, key_of, queue_of) == ["b1", "a1", "a2", "b3", "a3", "a4", "a5", "c6"]
    assert in_queue_places(considered, [], key_of, queue_of) == considered
    assert in_queue_places([], waiting, key_of, queue_of) == ["a1", "a3", "a5", "c6"]
