"""One canonical key per team name and slug (models.tenancy.canonical_key), replacing migration 0029's four.

The rule was two keys per value, its casefold and its slugify(): slugify drops '.' but keeps '-' and '_', so
`foo-bar`, `foo_bar` and `Foo.Bar` were three teams, although the refusal said team names were unique "ignoring
letter case and punctuation" (break-it trial 20, F6). The one rule now: a team name or slug is compared by its NFKC
normal form, case-folded, without '.', '_', '-' and white space (`foobar` for all three, and for `FOOBAR`); two
teams clash when the key of the name or slug of one is the key of the name or slug of the other. So the four
columns `name_casefold`, `name_slugify`, `slug_casefold`, `slug_slugify` and their indexes become two, `name_key`
and `slug_key`, each indexed, filled here for every row (the formula of this commit, frozen below).

Rows that now clash (`foo-bar` and `foo_bar`, both accepted under the old keys) are kept as they are, and nothing
here fails on them: there is no unique constraint on the keys, by design (migration 0029: the rule spans a
team's name and slug columns, and renaming teams that URLs, scripts, metrics' labels and federated jobs name is
their admins' choice, not a migration's). From this migration on:

- the teams admin warns, on its list and on each such team's page, about every team whose name is another team's
  name or slug by the rule, naming both and what to do: rename it (services.tenancy.team_clashes);
- a write that would keep or make a clash is refused with the rule's 400 (services.tenancy._team_name_errors): a
  new team, and the next rename of either team to a name that still has the other's key; a rename to a name of
  its own is taken, and a description-only change is not checked;
- two slugs that are one by the rule (`foo-bar`, `foo_bar`) stay, unwarned: a slug never changes (URLs, jobs,
  metrics' labels and federated jobs name the team by it) and each still names its own team;
- `?team=` (queries.find_team) names each of them by its exact slug, then its exact name; a value matching only
  by the key names the first of them by id.
"""
import unicodedata

from django.db import migrations, models

SEPARATORS = "._-"


def _key(value) -> str:
    if not isinstance(value, str):
        return ""
    folded = unicodedata.normalize("NFKC", value).casefold()
    return "".join(c for c in folded if c not in SEPARATORS and not c.isspace())


def fill_keys(apps, schema_editor):
    """The key of every team's name and slug, as stored (clashing rows included: kept, see above)."""
    Team = apps.get_model("gpuplatform", "Team")
    teams = list(Team.objects.only("pk", "name", "slug"))
    for team in teams:
        team.name_key, team.slug_key = _key(team.name), _key(team.slug)
    Team.objects.bulk_update(teams, ("name_key", "slug_key"), batch_size=500)


def fill_old_keys(apps, schema_editor):
    """Reversed: migration 0029's four keys again (its formula: casefold and slugify of the name and the slug)."""
    from django.utils.text import slugify

    Team = apps.get_model("gpuplatform", "Team")
    teams = list(Team.objects.only("pk", "name", "slug"))
    for team in teams:
        team.name_casefold, team.name_slugify = team.name.casefold(), slugify(team.name)
        team.slug_casefold, team.slug_slugify = team.slug.casefold(), slugify(team.slug)
    Team.objects.bulk_update(teams, ("name_casefold", "name_slugify", "slug_casefold", "slug_slugify"),
                             batch_size=500)


class Migration(migrations.Migration):

    dependencies = [
        ('gpuplatform', '0029_team_canonical_keys'),
    ]

    operations = [
        # reversed last: migration 0029's columns are back by then
        migrations.RunPython(migrations.RunPython.noop, fill_old_keys),
        migrations.RemoveIndex(model_name='team', name='team_name_casefold_idx'),
        migrations.RemoveIndex(model_name='team', name='team_name_slugify_idx'),
        migrations.RemoveIndex(model_name='team', name='team_slug_casefold_idx'),
        migrations.RemoveIndex(model_name='team', name='team_slug_slugify_idx'),
        migrations.RemoveField(model_name='team', name='name_casefold'),
        migrations.RemoveField(model_name='team', name='name_slugify'),
        migrations.RemoveField(model_name='team', name='slug_casefold'),
        migrations.RemoveField(model_name='team', name='slug_slugify'),
        migrations.AddField(
            model_name='team',
            name='name_key',
            field=models.TextField(default='', editable=False),
        ),
        migrations.AddField(
            model_name='team',
            name='slug_key',
            field=models.TextField(default='', editable=False),
        ),
        migrations.RunPython(fill_keys, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name='team',
            index=models.Index(fields=['name_key'], name='team_name_key_idx'),
        ),
        migrations.AddIndex(
            model_name='team',
            index=models.Index(fields=['slug_key'], name='team_slug_key_idx'),
        ),
    ]
