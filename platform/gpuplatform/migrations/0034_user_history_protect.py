"""Session 27 (an admin's trial): deleting a user whose job was running succeeded, the confirmation page listing only
the token and the membership; the job's submitter, its "submitted" Event's actor and ?submitter= then lost who it was.
A user who submitted a job (a federated job too) or whom an Event names as its actor is now PROTECTed: the delete is
refused (Django's ProtectedError; the admin's delete page names the history and says to deactivate the account,
is_active=False, which refuses sign-in and the account's API tokens). Memberships, API tokens, idempotency keys and a
node agent's scope still go with a user that has no history (CASCADE, unchanged).

Django's on_delete only: no SQL (sqlmigrate prints nothing to run). event.actor_id keeps its deferred trigger
(0033_deferred_fk) against a raw DELETE."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('gpuplatform', '0033_deferred_fk'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='event',
            name='actor',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name='federatedjob',
            name='submitter',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='federated_jobs', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name='job',
            name='submitter',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, to=settings.AUTH_USER_MODEL),
        ),
    ]
