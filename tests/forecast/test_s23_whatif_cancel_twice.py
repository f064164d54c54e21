"""A what-if change naming a job an earlier change already cancelled says so (new-user trial 23: two cancels of
running job 44 answered {"changes[1].job": ["no pending or running job 44"]}, as if 44 did not exist)."""
from __future__ import annotations

import pytest

from scheduler.forecast.whatif import WhatIfError, what_if
from tests.forecast.test_whatif import _world, est


@pytest.mark.parametrize("second", [{"kind": "cancel", "job": "r1"}, {"kind": "set_priority", "job": "r1",
                                                                        "priority": 3}])
def test_a_change_after_the_cancel_of_its_job_names_the_cancelling_change(second):
    changes = [{"kind": "set_weight", "queue": "a", "weight": 2}, {"kind": "cancel", "job": "r1"}, second]
    with pytest.raises(WhatIfError) as err:
        what_if(_world().snapshot(), changes, est)
    assert (err.value.index, err.value.field) == (2, "job")
    assert err.value.message == "job 'r1' is already cancelled by changes[1]"


def test_a_job_that_never_was_is_still_no_pending_or_running_job():
    with pytest.raises(WhatIfError) as err:
        what_if(_world().snapshot(), [{"kind": "cancel", "job": "r1"}, {"kind": "cancel", "job": "ghost"}], est)
    assert err.value.message == "no pending or running job 'ghost'"
