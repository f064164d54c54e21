"""When a node entered its state and why: Node.state_since and Node.state_reason, written with the state by
services.node_states.transition (trial 21, F11: a not_ready node showed no reason and no "since" in the API and on
the nodes page).

Filled here for the nodes there are from their audit trail: each node's latest state-change Event (the kinds the
transition table writes, frozen below) whose `to` is the state the node is in gives the time and the reason it
recorded (failure detection's "no heartbeat since 12:00:00", an admin's cordon reason, Slurm's). A node with no such
Event (in its state since it was loaded or registered) keeps null / "": nothing is made up. Reversed: the columns are
dropped (the Events stay).
"""
from django.db import migrations, models

# services/node_states.py TRANSITIONS' Event kinds, as of this migration
STATE_KINDS = ("cordoned", "drained", "uncordoned", "node_not_ready", "node_ready", "repair_started",
               "validation_started", "validation_passed", "validation_failed")


def fill_from_events(apps, schema_editor):
    Node = apps.get_model("gpuplatform", "Node")
    Event = apps.get_model("gpuplatform", "Event")
    for node in Node.objects.only("pk", "state").iterator():
        for time, data in (Event.objects.filter(node_id=node.pk, kind__in=STATE_KINDS)
                           .order_by("-time", "-id").values_list("time", "data")[:20]):
            to = (data or {}).get("to") if isinstance(data, dict) else None
            if to is None or to == node.state:  # (an old Event without `to`: the latest change is the one)
                reason = (data or {}).get("reason", "") if isinstance(data, dict) else ""
                Node.objects.filter(pk=node.pk).update(state_since=time, state_reason=str(reason or "")[:300])
                break


class Migration(migrations.Migration):

    dependencies = [
        ('gpuplatform', '0030_team_one_canonical_key'),
    ]

    operations = [
        migrations.AddField(
            model_name='node',
            name='state_since',
            field=models.DateTimeField(blank=True, help_text='when the node entered its state', null=True),
        ),
        migrations.AddField(
            model_name='node',
            name='state_reason',
            field=models.CharField(blank=True, help_text='why it entered its state', max_length=300),
        ),
        migrations.RunPython(fill_from_events, migrations.RunPython.noop),
    ]
