"""Review 19c: every list's `ordering` naming a field it does not order by is a 400 naming it (DRF's OrderingFilter
dropped it without a word); list parameters a user reads as a filter either work or are a 400 naming them; a member
cluster name that breaks the rule reads one way in POST and PATCH."""
from __future__ import annotations

import pytest

# list -> one field it orders by (ordering_fields), and a word of its 400's "choose from" list
LISTS = {
    "/api/v1/teams/": "name", "/api/v1/memberships/": "role", "/api/v1/queues/": "weight",
    "/api/v1/quotas/": "flavor", "/api/v1/domains/": "tier", "/api/v1/nodes/": "last_heartbeat",
    "/api/v1/jobs/": "priority", "/api/v1/events/": "kind", "/api/v1/diagnosis-rules/": "name",
    "/api/v1/health-rules/": "name", "/api/v1/scheduler-cycles/": "duration_ms", "/api/v1/cluster-metrics/": "time",
    "/api/v1/federation/jobs/": "state", "/api/v1/federation/clusters/": "api_url",
}


@pytest.fixture
def member_clusters(cluster, settings):
    from gpuplatform.federation import manager

    for name in ("east", "west"):
        manager.register_cluster(name=name, api_url=f"http://{name}.test:8000", token=f"tok-{name}")


@pytest.mark.django_db
@pytest.mark.parametrize("url,field", LISTS.items())
@pytest.mark.parametrize("ordering,bad", [("nope", "'nope'"), ("-nope", "'-nope'"), ("{f},nope", "'nope'"),
                                          ("-{f},-nope", "'-nope'"), ("--{f}", "'--{f}'"), ("{f},", "''"),
                                          (",", "'', ''"), ("-", "'-'")])
def test_an_ordering_the_list_does_not_take_is_a_400_naming_it(admin, member_clusters, url, field, ordering, bad):
    r = admin.get(f"{url}?ordering={ordering.format(f=field)}")
    assert r.status_code == 400, (url, ordering, r.status_code, r.content[:300])
    assert list(r.json()) == ["ordering"], r.json()
    message = r.json()["ordering"][0]
    assert message.startswith(f"cannot order by {bad.format(f=field)}; choose from "), message
    assert field in message.split("choose from ")[1] and "('-' for descending)" in message, message


@pytest.mark.django_db
@pytest.mark.parametrize("url,field", LISTS.items())
def test_an_ordering_the_list_takes_and_an_exactly_empty_one_still_list(admin, member_clusters, url, field):
    for ordering in (field, f"-{field}", f" -{field} "):
        r = admin.get(f"{url}?ordering={ordering}")
        assert r.status_code == 200, (url, ordering, r.status_code, r.content[:300])
    for ordering in ("", "%20"):  # trial 20, F3: sent empty (or blank) is a 400 naming it, no longer the default order
        r = admin.get(f"{url}?ordering={ordering}")
        assert r.status_code == 400 and list(r.json()) == ["ordering"], (url, ordering, r.status_code, r.content[:300])


@pytest.mark.django_db
def test_the_ordering_is_followed(admin, member_clusters):
    names = lambda q: [t["name"] for t in admin.get(f"/api/v1/teams/?{q}").json()["results"]]  # noqa: E731
    assert names("ordering=-name") == ["beta", "alpha"] and names("ordering=name") == names("") == ["alpha", "beta"]
    clusters = lambda q: [c["name"] for c in admin.get(f"/api/v1/federation/clusters/?{q}").json()["results"]]  # noqa: E731
    assert clusters("ordering=-name") == ["west", "east"]


@pytest.mark.django_db
def test_the_keyset_lists_refuse_an_ordering_of_only_commas_instead_of_a_500(admin):
    for url in ("/api/v1/jobs/", "/api/v1/events/"):
        r = admin.get(f"{url}?ordering=,")
        assert r.status_code == 400 and list(r.json()) == ["ordering"], (url, r.status_code, r.content[:300])


@pytest.mark.django_db
def test_a_detail_read_is_not_held_to_the_lists_ordering(admin):
    assert admin.get("/api/v1/teams/alpha/?ordering=nope").status_code == 200


# --- list parameters a user reads as a filter: they work or are a 400 naming them (never ignored, never a 500) ----

@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/api/v1/diagnosis-rules/", "/api/v1/health-rules/"])
@pytest.mark.parametrize("value", ["maybe", "yes", "no", "on", "2"])
def test_a_rule_lists_enabled_that_is_not_a_boolean_is_a_400_naming_it(admin, url, value):
    r = admin.get(f"{url}?enabled={value}")
    assert r.status_code == 400 and r.json() == {"enabled": ["must be true or false (or 1 / 0)"]}, \
        (url, value, r.status_code, r.content[:300])


@pytest.mark.django_db
def test_a_rule_lists_enabled_filters(admin, cluster):
    from gpuplatform.models import HealthRule

    for name, enabled in (("on", True), ("off", False)):
        HealthRule.objects.create(name=name, signal="temperature", op=">", value=90, action="cordon", source="x",
                                  enabled=enabled)
    names = lambda q: [r["name"] for r in admin.get(f"/api/v1/health-rules/?{q}").json()["results"]]  # noqa: E731
    assert names("enabled=true") == names("enabled=1") == ["on"] and names("enabled=False") == ["off"]
    assert sorted(names("")) == ["off", "on"]  # left out: either
    assert admin.get("/api/v1/health-rules/?enabled=").status_code == 400  # sent empty: a 400 (trial 20, F3)


@pytest.mark.django_db
@pytest.mark.parametrize("url,param,value,rule", [
    ("/api/v1/domains/", "tier", "1.5", "a tier is a whole number from 1 to 32767"),
    ("/api/v1/domains/", "tier", "0", "a tier is a whole number from 1 to 32767"),
    ("/api/v1/domains/", "tier", "-1", "a tier is a whole number from 1 to 32767"),
    ("/api/v1/domains/", "tier", "abc", "a tier is a whole number from 1 to 32767"),
    ("/api/v1/domains/", "tier", "99999999999999999999", "a tier is a whole number from 1 to 32767"),
    ("/api/v1/events/", "cycle", "1.5", "a cycle number is a whole number from 0 to 2147483647"),
    ("/api/v1/events/", "cycle", "-1", "a cycle number is a whole number from 0 to 2147483647"),
    ("/api/v1/events/", "cycle", "abc", "a cycle number is a whole number from 0 to 2147483647"),
    ("/api/v1/cluster-metrics/", "cycle", "2.5", "a cycle number is a whole number from 0 to 2147483647"),
    ("/api/v1/cluster-metrics/", "cycle", "99999999999999999999", "a cycle number is a whole number from 0 to 2147483647"),
])
def test_a_whole_number_filter_refuses_a_fraction_or_a_number_outside_naming_it(admin, url, param, value, rule):
    r = admin.get(f"{url}?{param}={value}")
    assert r.status_code == 400 and r.json() == {param: [rule]}, (url, value, r.status_code, r.content[:300])


@pytest.mark.django_db
def test_the_whole_number_filters_filter(admin, cluster):
    tiers = {d["tier"] for d in admin.get("/api/v1/domains/?tier=1").json()["results"]}
    assert tiers == {1}
    assert admin.get("/api/v1/domains/?tier=1.0").status_code == 400  # ASCII digits only (trial 20, F4)
    assert admin.get("/api/v1/events/?cycle=0").status_code == 200
    assert admin.get("/api/v1/cluster-metrics/?cycle=3").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/api/v1/teams/", "/api/v1/nodes/", "/api/v1/diagnosis-rules/",
                                 "/api/v1/federation/clusters/"])
@pytest.mark.parametrize("query,param", [
    ("limit=abc", "limit"), ("limit=-1", "limit"), ("limit=0", "limit"), ("limit=501", "limit"), ("limit=1.5", "limit"),
    ("limit=%20", "limit"), ("offset=-1", "offset"), ("offset=x", "offset"), ("offset=%20", "offset"),
    ("cursor=garbage", "cursor"), ("page=2", "page"), ("page_size=abc", "page_size"),
])
def test_the_offset_lists_refuse_a_paging_parameter_they_cannot_follow(admin, member_clusters, url, query, param):
    r = admin.get(f"{url}?{query}")
    assert r.status_code == 400 and list(r.json()) == [param], (url, query, r.status_code, r.content[:300])


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/api/v1/jobs/", "/api/v1/events/"])
@pytest.mark.parametrize("query,param", [
    ("limit=abc", "limit"), ("limit=-1", "limit"), ("limit=%20", "limit"), ("offset=5", "offset"),
    ("cursor=garbage", "cursor"), ("cursor=%20", "cursor"), ("page_size=abc", "page_size"),
])
def test_the_keyset_lists_refuse_a_paging_parameter_they_cannot_follow(admin, url, query, param):
    r = admin.get(f"{url}?{query}")
    assert r.status_code == 400 and list(r.json()) == [param], (url, query, r.status_code, r.content[:300])


# --- a member cluster name that breaks the rule: one wording, one function, POST and PATCH / PUT (and the admin) ---

CLUSTERS = "/api/v1/federation/clusters/"
NAME_RULE = "a member cluster name is 1 to 63 lower-case letters, digits and '-', starting with a letter or digit"
BROKEN_NAMES = ["Bad_Name", "bad name", "bad.name", "-bad", "BAD", "b\u00e9", "a" * 64, "a" * 200, "", 5, ["x"]]


@pytest.fixture
def superuser_page(users):
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", password="pw"))
    return client


@pytest.mark.django_db
@pytest.mark.parametrize("name", BROKEN_NAMES, ids=repr)
def test_a_broken_member_cluster_name_reads_one_way_in_post_patch_and_put(admin, member_clusters, name):
    from gpuplatform.models import MemberCluster

    west = MemberCluster.objects.get(name="west").pk
    answers = {
        "POST": admin.post(CLUSTERS, {"name": name, "api_url": "http://x.test:8000", "token": "t"}, format="json"),
        "PATCH": admin.patch(f"{CLUSTERS}{west}/", {"name": name}, format="json"),
        "PUT": admin.put(f"{CLUSTERS}{west}/", {"name": name, "api_url": "http://x.test:8000"}, format="json"),
    }
    for method, r in answers.items():
        assert r.status_code == 400 and r.json() == {"name": [NAME_RULE]}, (method, name, r.status_code, r.content)
    assert sorted(MemberCluster.objects.values_list("name", flat=True)) == ["east", "west"]


@pytest.mark.django_db
def test_the_name_rule_is_one_function_the_service_and_the_admin_use(admin, member_clusters, superuser_page):
    from gpuplatform.errors import ValidationError
    from gpuplatform.federation import manager
    from gpuplatform.models import MemberCluster

    assert manager.cluster_name_error("Bad_Name") == manager.cluster_name_error("a" * 64) == NAME_RULE
    assert manager.cluster_name_error("eu-1") is None and manager.cluster_name_error("a" * 63) is None
    assert manager.cluster_name_error("east\n") == NAME_RULE  # `$` let a trailing newline through
    with pytest.raises(ValidationError) as exc:
        manager.update_cluster(MemberCluster.objects.get(name="west"), name="bad.name")
    assert exc.value.errors == {"name": NAME_RULE}, exc.value.errors
    for name in ("bad.name", "Bad_Name", "a" * 64):
        page = superuser_page.post("/admin/gpuplatform/membercluster/add/",
                                   {"name": name, "api_url": "http://x.test:8000", "token": "t", "labels": "{}",
                                    "cost_per_gpu_hour": 0, "enabled": "on"})
        assert page.status_code == 200 and NAME_RULE.replace("'", "&#x27;") in page.content.decode(), name
    long = "a" * 63
    r = admin.post(CLUSTERS, {"name": long, "api_url": "http://x.test:8000", "token": "t"}, format="json")
    assert r.status_code == 201 and r.json()["name"] == long, r.content
    r = admin.patch(f"{CLUSTERS}{r.json()['id']}/", {"name": "renamed-1"}, format="json")
    assert r.status_code == 200 and r.json()["name"] == "renamed-1", r.content
