"""A team's canonical keys on its row: the casefold and the slugify() of its name and of its slug
(models.tenancy.canonical_keys), each column indexed, so the check that a new or renamed team's keys meet no other
team's (services.tenancy._team_clash) is indexed lookups, not a read of every team's name and slug on each create
and rename. Filled here for the rows there are (the formula of this commit, frozen below); Team.save() and its
queryset write them from then on.

No unique constraint on the keys, by choice:

- The rule is that no key of one team is a key of another, whichever of name and slug holds it: the name `Alpha`
  clashes with another team's slug `alpha`. That spans the four columns; a unique constraint is on one column (or
  on one row's tuple) and cannot state it. One per column would be part of the rule, not the rule, and would fail
  as below.
- Rows stored before the rule (trial 18f) may break it: `Zeta` (slug `zeta`) next to `zeta` (slug `zeta-2`, sent
  with it) were both accepted. The service keeps such a pair as it is (a team is refused only when it is written
  again into a clash; queries.find_team resolves a value to one team, the slug's first). A constraint would fail
  this migration on them, or make it rename teams that pages, scripts, metrics' labels and federated jobs name:
  their admins' choice, not a migration's.
- Every writer of a team's name or slug (services.create_team, update_team, delete_team) takes the advisory name
  locks on these same keys (_lock_team_names) before its check and holds them to its commit, so two writes that
  could clash run one after the other and the second reads the first's row: the check under the locks is the
  rule's enforcement, as before. `name` and `slug` keep their unique constraints, which are exactly their rules (one
  team per name, one per slug, as written).
"""
from django.db import migrations, models
from django.utils.text import slugify

KEY_FIELDS = ("name_casefold", "name_slugify", "slug_casefold", "slug_slugify")


def _keys(value: str) -> tuple[str, str]:
    return value.casefold(), slugify(value)


def fill_keys(apps, schema_editor):
    """The keys of every team, from its name and slug as stored (clashing pairs included: kept, see above)."""
    Team = apps.get_model("gpuplatform", "Team")
    teams = list(Team.objects.only("pk", "name", "slug"))
    for team in teams:
        team.name_casefold, team.name_slugify = _keys(team.name)
        team.slug_casefold, team.slug_slugify = _keys(team.slug)
    Team.objects.bulk_update(teams, KEY_FIELDS, batch_size=500)


class Migration(migrations.Migration):

    dependencies = [
        ('gpuplatform', '0028_gpu_out_of_service'),
    ]

    operations = [
        migrations.AddField(
            model_name='team',
            name='name_casefold',
            field=models.TextField(default='', editable=False),
        ),
        migrations.AddField(
            model_name='team',
            name='name_slugify',
            field=models.TextField(default='', editable=False),
        ),
        migrations.AddField(
            model_name='team',
            name='slug_casefold',
            field=models.TextField(default='', editable=False),
        ),
        migrations.AddField(
            model_name='team',
            name='slug_slugify',
            field=models.TextField(default='', editable=False),
        ),
        migrations.RunPython(fill_keys, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name='team',
            index=models.Index(fields=['name_casefold'], name='team_name_casefold_idx'),
        ),
        migrations.AddIndex(
            model_name='team',
            index=models.Index(fields=['name_slugify'], name='team_name_slugify_idx'),
        ),
        migrations.AddIndex(
            model_name='team',
            index=models.Index(fields=['slug_casefold'], name='team_slug_casefold_idx'),
        ),
        migrations.AddIndex(
            model_name='team',
            index=models.Index(fields=['slug_slugify'], name='team_slug_slugify_idx'),
        ),
    ]
