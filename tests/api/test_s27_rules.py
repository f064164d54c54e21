"""Session 27, an admin's report on /api/v1/health-rules/ and /api/v1/diagnosis-rules/: a health rule's value is
judged by its op and signal (gt/ge a number, not true/false; in a non-empty list; no signal is below 0), rule names
are unique by the queue and team names' rule in its words, every bad field is named at once, and a diagnosis rule
with neither pattern nor when is a 400 on `pattern` (it read {"rule": [...]}, a key the request does not have)."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.diagnosis import engine
from gpuplatform.errors import ValidationError
from gpuplatform.models import DiagnosisRule, HealthRule

HEALTH = {"name": "hot", "signal": "thermal_slowdown_seconds", "op": "gt", "value": 60, "action": "cordon",
          "category": "gpu_hardware", "source": "our cooling SLO"}
DIAG = {"name": "mine", "category": "user_error", "action": "retry", "source": "our runbook", "pattern": "boom"}


def _post(admin, url, body):
    return admin.post(url, body, format="json")


@pytest.mark.parametrize("change,field,words", [
    ({"signal": "xid", "op": "gt", "value": True}, "value", "needs a number, not true/false"),
    ({"op": "ge", "value": False}, "value", "needs a number, not true/false"),
    ({"op": "gt", "value": "60"}, "value", "needs a number"),
    ({"signal": "xid", "op": "in", "value": []}, "value", "non-empty list"),
    ({"signal": "xid", "op": "in", "value": [48, True]}, "value", "list of whole numbers"),
    ({"signal": "heartbeat_lost_seconds", "op": "gt", "value": -5}, "value", "never below 0"),
    ({"signal": "ecc_dbe_volatile", "op": "ge", "value": -0.5}, "value", "a count of errors, never below 0"),
    ({"signal": "nvlink_down", "op": "eq", "value": -1}, "value", "never below 0"),
    ({"signal": "xid", "op": "in", "value": [79, -3]}, "value", "never below 0"),
])
def test_a_health_rule_value_its_op_and_signal_cannot_use_is_a_400_on_value(admin, change, field, words):
    r = _post(admin, "/api/v1/health-rules/", {**HEALTH, **change})
    assert r.status_code == 400 and list(r.json()) == [field], r.content
    assert words in r.json()[field][0], r.json()
    assert not HealthRule.objects.exists()


@pytest.mark.parametrize("change", [
    {"op": "gt", "value": 0}, {"op": "ge", "value": 2.5}, {"signal": "xid", "op": "in", "value": [48, 79]},
    {"signal": "heartbeat_lost_seconds", "op": "gt", "value": "default"}, {"signal": "row_remap_failure", "op": "any"},
    {"signal": "row_remap_failure", "op": "eq", "value": True},
])
def test_sound_health_rules_are_still_accepted(admin, change):
    r = _post(admin, "/api/v1/health-rules/", {**HEALTH, **change})
    assert r.status_code == 201, r.content


def test_every_bad_field_of_a_health_rule_is_named_at_once(admin):
    r = _post(admin, "/api/v1/health-rules/", {**HEALTH, "signal": "fan_speed", "category": "cancelled",
                                               "action": "reboot"})
    assert r.status_code == 400 and set(r.json()) == {"signal", "category", "action"}, r.content
    assert "signal must be one of" in r.json()["signal"][0]
    assert "category must be one of" in r.json()["category"][0]
    r = _post(admin, "/api/v1/health-rules/", {**{k: v for k, v in HEALTH.items() if k != "source"},
                                               "op": "in", "value": [], "category": "nope"})
    assert set(r.json()) == {"source", "value", "category"}, r.content
    r = _post(admin, "/api/v1/health-rules/", {**HEALTH, "op": "between", "value": True, "signal": "fan"})
    assert set(r.json()) == {"op", "signal"}, r.content  # the value waits for an op it can be judged by


def test_a_patch_judges_the_value_with_the_rule_s_own_op_and_signal(admin):
    r = _post(admin, "/api/v1/health-rules/", {**HEALTH, "signal": "heartbeat_lost_seconds"})
    assert r.status_code == 201, r.content
    url = f"/api/v1/health-rules/{r.json()['id']}/"
    r = admin.patch(url, {"value": -5}, format="json")
    assert r.status_code == 400 and "heartbeat_lost_seconds is a duration in seconds" in r.json()["value"][0], r.content
    r = admin.patch(url, {"op": "in"}, format="json")  # 60 is not a list
    assert r.status_code == 400 and "non-empty list" in r.json()["value"][0], r.content
    assert admin.patch(url, {"value": 90}, format="json").status_code == 200
    assert admin.patch(url, {"name": "hot"}, format="json").status_code == 200  # its own name: no clash


@pytest.mark.parametrize("url,body,noun", [("/api/v1/health-rules/", HEALTH, "health rule"),
                                           ("/api/v1/diagnosis-rules/", DIAG, "diagnosis rule")])
def test_rule_names_are_one_whatever_their_case_in_the_product_s_words(admin, url, body, noun):
    assert _post(admin, url, {**body, "name": "hot-xid"}).status_code == 201
    for other in ("hot-xid", "HOT-XID", "hot_xid", "Hot.Xid"):
        r = _post(admin, url, {**body, "name": other})
        assert r.status_code == 400 and list(r.json()) == ["name"], r.content
        said = r.json()["name"][0]
        assert said.startswith(f"a {noun} named 'hot-xid' already exists: ") and "letter case" in said, said
        assert "with this name already exists" not in said
    second = _post(admin, url, {**body, "name": "cold"}).json()["id"]
    r = admin.patch(f"{url}{second}/", {"name": "HOT_XID"}, format="json")
    assert r.status_code == 400 and "already exists" in r.json()["name"][0], r.content


def test_the_services_refuse_the_same_names_and_values(db):
    services.save_health_rule(HealthRule(**HEALTH))
    with pytest.raises(ValidationError) as err:
        services.save_health_rule(HealthRule(**{**HEALTH, "name": "HOT", "op": "in", "value": [],
                                                "signal": "xid", "category": "nope"}))
    assert set(err.value.errors) == {"name", "value", "category"}, err.value.errors
    assert "a health rule named 'hot' already exists" in err.value.errors["name"]
    services.save_diagnosis_rule(DiagnosisRule(**DIAG))
    with pytest.raises(ValidationError) as err:
        services.save_diagnosis_rule(DiagnosisRule(**{**DIAG, "name": "MINE"}))
    assert "a diagnosis rule named 'mine' already exists" in err.value.errors["name"]
    with pytest.raises(ValidationError) as err:
        services.save_diagnosis_rule(DiagnosisRule(**{**DIAG, "name": "other", "pattern": ""}))
    assert list(err.value.errors) == ["pattern"], err.value.errors


def test_the_shipped_parser_refuses_the_nonsense_values_too():
    base = {"id": "x", "signal": "xid", "op": "in", "action": "record", "source": "s"}
    for value, words in (([], "non-empty list"), ([True], "whole numbers"), ([-1], "never below 0")):
        with pytest.raises(engine.RuleError, match=words):
            engine.parse_health_rules({"rules": [{**base, "value": value}]})
    with pytest.raises(engine.RuleError, match="not true/false"):
        engine.parse_health_rules({"rules": [{**base, "op": "gt", "value": True}]})
    from gpuplatform.diagnosis import tables

    engine.parse_health_rules(tables.shipped_health_rules())  # the shipped table still parses


def test_a_diagnosis_rule_without_pattern_or_when_is_a_400_on_pattern(admin):
    r = _post(admin, "/api/v1/diagnosis-rules/", {**DIAG, "pattern": ""})
    assert r.status_code == 400 and list(r.json()) == ["pattern"], r.content
    assert "give a pattern" in r.json()["pattern"][0]
    body = {k: v for k, v in DIAG.items() if k not in ("pattern", "source")}
    r = _post(admin, "/api/v1/diagnosis-rules/", body)  # named beside the other fields
    assert r.status_code == 400 and set(r.json()) == {"pattern", "source"}, r.content
    r = _post(admin, "/api/v1/diagnosis-rules/", {**DIAG, "when": {"signal": 9}})
    assert r.status_code == 400 and list(r.json()) == ["when"], r.content
    assert "exactly one of `pattern` and `when`" in r.json()["when"][0]
    r = _post(admin, "/api/v1/diagnosis-rules/", {**DIAG, "pattern": "", "when": {"signal": 9}})
    assert r.status_code == 201, r.content
    r = admin.patch(f"/api/v1/diagnosis-rules/{r.json()['id']}/", {"when": None}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["pattern"], r.content
    assert "rule" not in r.json()
