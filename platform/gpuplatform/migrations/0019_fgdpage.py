from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('gpuplatform', '0018_sharing'),
    ]

    operations = [
        migrations.AddField(
            model_name='clustersample',
            name='sharing',
            field=models.JSONField(blank=True, default=dict, help_text='GPU sharing (scheduler.core.sharing.sharing_metrics): allocated_gpu_equivalents, shared_gpus, fgd_fragmentation {flavor: GPUs unusable by the expected request mix}, mig_instances, mig_used; {} for a cycle without shared, auto or MIG GPUs nor sharing jobs'),
        ),
    ]
