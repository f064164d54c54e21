"""Issue 12/13 (trust): API tokens stored hashed (django-rest-knox), and the per-queue `held` series.

Existing tokens keep working: every row of DRF's plaintext `authtoken_token` table (when this database
has one) becomes a knox AuthToken holding only the token's SHA-512 digest (knox's SECURE_HASH_ALGORITHM
default, which settings.REST_KNOX keeps) and its first 15 characters (the lookup index), with an expiry
from now: AGENT_TOKEN_TTL_DAYS for users of the node-agents group, API_TOKEN_TTL_DAYS for everyone else.
The plaintext rows are then deleted. Going back cannot restore plaintext tokens: re-issue them
(`manage.py agent_token`, POST /api/v1/auth-token/).
"""
import hashlib
from datetime import timedelta

from django.conf import settings
from django.db import migrations, models
from django.utils import timezone


def hash_plaintext_tokens(apps, schema_editor):
    connection = schema_editor.connection
    if "authtoken_token" not in connection.introspection.table_names():
        return
    AuthToken = apps.get_model("knox", "AuthToken")
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    agents = set(User.objects.filter(groups__name="node-agents").values_list("pk", flat=True))
    now = timezone.now()
    api_ttl = timedelta(days=float(getattr(settings, "API_TOKEN_TTL_DAYS", 30)))
    agent_ttl = timedelta(days=float(getattr(settings, "AGENT_TOKEN_TTL_DAYS", 365)))
    with connection.cursor() as cursor:
        cursor.execute("SELECT key, user_id FROM authtoken_token")
        rows = cursor.fetchall()
        AuthToken.objects.bulk_create([
            AuthToken(digest=hashlib.sha512(key.encode()).hexdigest(), token_key=key[:15], user_id=user_id,
                      expiry=now + (agent_ttl if user_id in agents else api_ttl))
            for key, user_id in rows], ignore_conflicts=True)
        cursor.execute("DELETE FROM authtoken_token")


class Migration(migrations.Migration):

    dependencies = [
        ('gpuplatform', '0013_i17'),
        ('knox', '0009_extend_authtoken_field'),
    ]

    operations = [
        migrations.RunPython(hash_plaintext_tokens, migrations.RunPython.noop),
        migrations.AddField(
            model_name='queuesample',
            name='held',
            field=models.PositiveIntegerField(
                default=0, help_text="GPUs held (reserved) for the subtree's jobs that have not started, GPUs"),
        ),
    ]
