"""Trial 21, F13: one rule for every user text field of the API, on the text as sent: no control character other
than newline and tab, no invisible format character (U+202E, the right-to-left override, and the other bidi
controls, zero-width spaces), no text of only white space ("\\n" was trimmed to "" and taken as left empty); a
related name (`team`) sent empty is a 400, never the default."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.models import Job, Queue

SLEEP = ["sleep", "3600"]


def body(**extra) -> dict:
    return {"name": "j", "queue": "alpha", "command": SLEEP, "roles": [{"name": "main", "tasks": 1,
                                                                        "gpus_per_task": 1}], **extra}


@pytest.mark.django_db
@pytest.mark.parametrize("field, value", [
    ("working_dir", "\n"), ("working_dir", " "), ("working_dir", "\t\n"), ("image", "\n"),
    ("external_id", "\n"), ("external_id", " \u3000")])
def test_a_text_field_of_only_white_space_is_a_400_naming_it(client_for, field, value):
    r = client_for("member").post("/api/v1/jobs/", body(**{field: value}), format="json")
    assert r.status_code == 400 and list(r.json()) == [field], r.content
    assert "only white space" in r.json()[field][0]
    assert not Job.objects.exists()


BIDI = ["\u202e", "\u202a", "\u202b", "\u202c", "\u202d", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f",
        "\u061c", "\u200b", "\ufeff", "\u00ad"]


@pytest.mark.django_db
@pytest.mark.parametrize("char", BIDI)
@pytest.mark.parametrize("field, value", [("external_id", "ab{c}cd"), ("working_dir", "/data/{c}x"),
                                          ("image", "nvcr.io/x{c}:1")])
def test_format_characters_are_refused_in_job_text_fields(client_for, field, value, char):
    r = client_for("member").post("/api/v1/jobs/", body(**{field: value.format(c=char)}), format="json")
    assert r.status_code == 400 and list(r.json()) == [field], (char, r.content)
    assert "control character" in r.json()[field][0]  # one-line fields: the one-line rule (trial 26, F5)


@pytest.mark.django_db
@pytest.mark.parametrize("path, value", [("command", ["echo", "a\u202eb"]), ("env", {"A": "x\u202ey"}),
                                         ("env", {"A": "\x1b[31m"})])
def test_format_and_control_characters_are_refused_in_command_and_env(client_for, path, value):
    r = client_for("member").post("/api/v1/jobs/", body(**{path: value}), format="json")
    assert r.status_code == 400 and list(r.json())[0].startswith(path), r.content
    assert "control characters" in str(r.json())


@pytest.mark.django_db
def test_other_text_fields_follow_the_same_rule(client_for, admin, jobs):
    member = client_for("member")
    r = member.post(f"/api/v1/jobs/{jobs['own'].pk}/cancel/", {"reason": "done\u202e"}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["reason"], r.content
    r = member.post(f"/api/v1/jobs/{jobs['own'].pk}/cancel/", {"reason": " \n "}, format="json")
    assert r.status_code == 400 and "only white space" in r.json()["reason"][0], r.content
    r = admin.post("/api/v1/teams/", {"name": "gamma", "description": "a\u202eb"}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["description"], r.content
    from gpuplatform.models import Node

    node = Node.objects.order_by("name").first()
    r = admin.post(f"/api/v1/nodes/{node.name}/cordon/", {"reason": "x\u2067y"}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["reason"], r.content
    assert Node.objects.get(pk=node.pk).state == "ready"
    assert Job.objects.get(pk=jobs["own"].pk).state == "pending"


@pytest.mark.django_db
def test_multi_line_free_text_and_joiners_are_still_taken(client_for, jobs):
    member = client_for("member")
    persian = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"  # (a zero-width non-joiner inside)
    scientist = "\U0001f469\u200d\U0001f52c"  # (an emoji sequence: a zero-width joiner)
    r = member.post(f"/api/v1/jobs/{jobs['own'].pk}/cancel/",
                    {"reason": f"line one\nline two\twith a tab, {persian} {scientist}"}, format="json")
    assert r.status_code == 200, r.content
    r = member.post("/api/v1/jobs/", body(working_dir="", external_id="", name="ok"), format="json")
    assert r.status_code == 201, r.content
    r = member.post("/api/v1/jobs/", body(working_dir=" /data ", name="ok2", env={"CERT": "a\nb"}), format="json")
    assert r.status_code == 201 and r.json()["roles"][0]["working_dir"] == "/data", r.content


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["", " ", "\n"])
def test_a_team_sent_empty_is_a_400_naming_it(client_for, value):
    r = client_for("member").post("/api/v1/jobs/", body(team=value), format="json")
    assert r.status_code == 400 and list(r.json()) == ["team"], r.content
    assert "must not be empty" in r.json()["team"][0]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_team_left_out_or_null_is_still_the_default(client_for, cluster):
    member = client_for("member")
    assert member.post("/api/v1/jobs/", body(name="a"), format="json").status_code == 201
    r = member.post("/api/v1/jobs/", body(name="b", team=None), format="json")
    assert r.status_code == 201 and r.json()["team"] == Queue.objects.get(name="alpha").team.slug


@pytest.mark.django_db
def test_the_services_refuse_them_whatever_the_caller(users):
    for field, value in (("working_dir", "\n"), ("working_dir", "/a\u202eb"), ("external_id", "x\u202e")):
        with pytest.raises(services.ValidationError) as exc:
            services.submit_job(command=SLEEP, team=Queue.objects.get(name="alpha").team, queue="alpha", name="s",
                                roles=[{"tasks": 1, "gpus_per_task": 1}], submitter=users["member"],
                                **{field: value})
        assert list(exc.value.errors) == [field], (field, value, exc.value.errors)
