"""Each pipeline's Kafka principal gets a password of its own (AddField would give every
existing row the same one), and the run errors already recorded are scrubbed of credentials,
as new ones are when written."""

from django.db import migrations, models

import pipelines.models
from broker.redaction import redact


def passwords_of_their_own(apps, schema_editor) -> None:
    Pipeline = apps.get_model("pipelines", "Pipeline")
    for pipeline in Pipeline.objects.only("pk"):
        Pipeline.objects.filter(pk=pipeline.pk).update(
            kafka_password=pipelines.models.new_password()
        )


def scrub_errors(apps, schema_editor) -> None:
    PipelineRun = apps.get_model("pipelines", "PipelineRun")
    for run in PipelineRun.objects.exclude(last_error="").only("pk", "last_error"):
        if (scrubbed := redact(run.last_error)) != run.last_error:
            PipelineRun.objects.filter(pk=run.pk).update(last_error=scrubbed)


class Migration(migrations.Migration):
    dependencies = [
        ("pipelines", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="pipeline",
            name="kafka_password",
            field=models.CharField(
                default=pipelines.models.new_password, editable=False, max_length=64
            ),
        ),
        migrations.RunPython(passwords_of_their_own, migrations.RunPython.noop),
        migrations.RunPython(scrub_errors, migrations.RunPython.noop),
    ]
