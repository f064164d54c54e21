"""Two submit changes with one `id` (new-user trial 24, F5b): the second was refused as "'a' is already a job's id",
though no job has it: another change does. It now names that change; a clash with a job of the cluster keeps its
words."""
from __future__ import annotations

import pytest

from scheduler.forecast.whatif import WhatIfError, what_if
from tests.forecast.test_whatif import _world, est

SUBMIT = {"kind": "submit", "queue": "a", "tasks": 1, "gpus_per_task": 1}


def test_a_second_submit_with_the_same_id_names_the_first_change():
    changes = [{**SUBMIT, "id": "a"}, {"kind": "set_weight", "queue": "a", "weight": 2}, {**SUBMIT, "id": "a"}]
    with pytest.raises(WhatIfError) as err:
        what_if(_world().snapshot(), changes, est)
    assert (err.value.index, err.value.field, err.value.message) == (2, "id", "'a' is already the id of changes[0]")


def test_an_id_a_job_of_the_cluster_has_keeps_its_words():
    with pytest.raises(WhatIfError) as err:
        what_if(_world().snapshot(), [{**SUBMIT, "id": "pa"}], est)
    assert (err.value.index, err.value.field, err.value.message) == (0, "id", "'pa' is already a job's id")
