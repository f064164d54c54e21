"""New-user trial 26, finding 5: POST /api/v1/jobs/ with `working_dir` "/tmp\\n", "/tmp\\t" or "\\t/tmp", or
`external_id` "a\\n", answered 201 and stored "/tmp" / "a": DRF's CharField trimmed the newline or tab before the
one-line rule saw it, where docs/api.md says one-line fields take no newline or tab, checked as sent. They are a 400
naming the field and the one-line rule now (inputs.ONE_LINE_FIELDS), the job's and a role's, and so are the other
one-line fields of a body (an image, the names of a queue, a flavor, a MIG profile, the completion role). Spaces around
a value stay the description's rule (checked as sent, then trimmed: " /srv/run " is /srv/run), and a field of only
white space keeps its own 400 ("must not be only white space")."""
from __future__ import annotations

import pytest

from gpuplatform.inputs import ONE_LINE_RULE
from gpuplatform.models import Job

pytestmark = pytest.mark.django_db

SLEEP = ["sleep", "3600"]


def body(**extra) -> dict:
    return {"name": "j", "queue": "alpha", "command": SLEEP, "roles": [{"name": "main", "tasks": 1,
                                                                        "gpus_per_task": 1}], **extra}


@pytest.mark.parametrize("field, value, where", [
    ("working_dir", "/tmp\n", "'\\n' at character 5"), ("working_dir", "/tmp\t", "'\\t' at character 5"),
    ("working_dir", "\t/tmp", "'\\t' at character 1"), ("working_dir", "\n/tmp", "'\\n' at character 1"),
    ("external_id", "a\n", "'\\n' at character 2"), ("external_id", "\ta", "'\\t' at character 1"),
    ("image", "nvcr.io/x:1\n", "'\\n' at character 12"), ("completion_role", "main\n", "'\\n' at character 5"),
    ("queue", "alpha\n", "'\\n' at character 6"), ("queue", "\talpha", "'\\t' at character 1")])
def test_a_newline_or_tab_at_either_end_of_a_one_line_field_is_a_400_naming_it(client_for, field, value, where):
    r = client_for("member").post("/api/v1/jobs/", body(**{field: value}), format="json")
    assert r.status_code == 400, (r.status_code, r.content)
    assert r.json() == {field: [ONE_LINE_RULE + where]}, r.content
    assert not Job.objects.exists()


@pytest.mark.parametrize("field, value", [("working_dir", "/tmp\n"), ("flavor", "H100\n"), ("mig_profile", "\t")])
def test_a_roles_one_line_fields_too(client_for, field, value):
    sent = body()
    sent["roles"][0][field] = value
    r = client_for("member").post("/api/v1/jobs/", sent, format="json")
    assert r.status_code == 400 and list(r.json()) == [f"roles[0].{field}"], r.content
    assert not Job.objects.exists()


def test_spaces_around_a_value_are_still_the_description_rule_and_blank_its_own_400(client_for):
    member = client_for("member")
    r = member.post("/api/v1/jobs/", body(working_dir=" /srv/run ", external_id=" ci-1 "), format="json")
    assert r.status_code == 201, r.content
    assert (r.json()["external_id"], r.json()["roles"][0]["working_dir"]) == ("ci-1", "/srv/run")
    for value in ("\n", "\t", " \t\n"):
        r = member.post("/api/v1/jobs/", body(working_dir=value), format="json")
        assert r.status_code == 400 and "only white space" in r.json()["working_dir"][0], (value, r.content)
    r = member.post("/api/v1/jobs/", body(working_dir="/data/a b"), format="json")  # a space inside is text
    assert r.status_code == 201 and r.json()["roles"][0]["working_dir"] == "/data/a b", r.content
