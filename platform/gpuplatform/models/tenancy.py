import unicodedata

from django.conf import settings
from django.db import models, transaction

__all__ = ["Team", "Membership", "canonical_key", "name_meant", "TEAM_KEY_FIELDS", "TEAM_NAME_SEPARATORS"]

# The canonical key of a team's name and of its slug (canonical_key), stored on its row so that a clash of keys
# between two teams (services.tenancy._team_clash) is a few indexed lookups, not a read of every team
TEAM_KEY_FIELDS = ("name_key", "slug_key")
# what comparing two team names ignores, besides letter case (canonical_key; the wording: services.tenancy)
TEAM_NAME_SEPARATORS = "._-"


def canonical_key(value) -> str:
    """The key two teams' names and slugs are compared by (the one rule, docs/concepts.md "Teams"): the text
    normalised NFKC, case-folded, without the separators '.', '_', '-' (TEAM_NAME_SEPARATORS) and without white
    space. `foo-bar`, `foo_bar`, `Foo.Bar` and `FOOBAR` have one key (`foobar`): one team. "" for a value that is not
    text or holds nothing else. Two teams clash when the key of the name or slug of one is the key of the name or
    slug of the other (services.tenancy: team_keys, the name locks and the clash check use this one formula)."""
    if not isinstance(value, str):
        return ""
    folded = unicodedata.normalize("NFKC", value).casefold()
    return "".join(c for c in folded if c not in TEAM_NAME_SEPARATORS and not c.isspace())


def name_meant(rows, name) -> str | None:
    """The `name` field of the row among queryset `rows` that `name` means by the canonical-key rule (canonical_key),
    or None: the row of that exact name, else the first by id whose key is `name`'s. Reads every row's name (for
    the few rows of a kind: queues, health and diagnosis rules; services.queues.queue_named, services.rules.rule_named)."""
    if not isinstance(name, str):
        return None
    if rows.filter(name=name).exists():
        return name
    key = canonical_key(name)
    return next((other for other in rows.order_by("pk").values_list("name", flat=True)
                 if canonical_key(other) == key), None) if key else None


class TeamQuerySet(models.QuerySet):
    """Keeps the stored keys (TEAM_KEY_FIELDS) in step with `name` and `slug` whatever ORM write changes them:
    Team.save computes them; bulk_create, bulk_update and update, which do not call it, here too."""

    def bulk_create(self, objs, *args, **kwargs):
        objs = list(objs)
        for obj in objs:
            obj.set_keys()
        return super().bulk_create(objs, *args, **kwargs)

    def bulk_update(self, objs, fields, *args, **kwargs):
        objs, fields = list(objs), list(fields)
        if {"name", "slug"} & set(fields):
            for obj in objs:
                obj.set_keys()
            fields += [f for f in TEAM_KEY_FIELDS if f not in fields]
        return super().bulk_update(objs, fields, *args, **kwargs)

    def update(self, **kwargs):
        if not {"name", "slug"} & set(kwargs):
            return super().update(**kwargs)
        with transaction.atomic(using=self.db):  # the rows updated, read before (the update may unmatch them)
            pks = list(self.values_list("pk", flat=True))
            count = super().update(**kwargs)
            for team in self.model._base_manager.using(self.db).filter(pk__in=pks).only("pk", "name", "slug"):
                team.save(update_fields=TEAM_KEY_FIELDS)
            return count


class Team(models.Model):
    """A tenant: owns leaf queues and jobs. Members act on their own team's jobs only.

    `name_key`, `slug_key`: canonical_key of its name and of its slug, written with them (save(); TeamQuerySet),
    each indexed: the rule that no two teams share a key (services.tenancy) is checked with indexed lookups. Not
    unique in the database (migrations 0029 and 0030 say why)."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    name_key = models.TextField(default="", editable=False)
    slug_key = models.TextField(default="", editable=False)

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        # plain b-tree indexes (Meta.indexes: no second varchar_pattern_ops index as db_index would add): equality
        indexes = [models.Index(fields=[field], name=f"team_{field}_idx") for field in TEAM_KEY_FIELDS]

    def __str__(self) -> str:
        return self.name

    def set_keys(self) -> None:
        """The stored keys (TEAM_KEY_FIELDS) from the name and the slug as they are now."""
        self.name_key, self.slug_key = canonical_key(self.name), canonical_key(self.slug)

    def save(self, *args, **kwargs):
        """Saves the keys with the name and the slug: always computed; written too when `update_fields` names
        either."""
        self.set_keys()
        update_fields = kwargs.get("update_fields")
        if update_fields is not None and {"name", "slug"} & set(update_fields):
            kwargs["update_fields"] = {*update_fields, *TEAM_KEY_FIELDS}
        super().save(*args, **kwargs)


class Membership(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member", "member"
        ADMIN = "admin", "team admin"
        VIEWER = "viewer", "viewer"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"
