"""The topic import job's kind."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("api", "0002_roles")]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="kind",
            field=models.CharField(
                choices=[
                    ("reset_offsets", "Reset consumer group offsets"),
                    ("export_topic", "Export a topic's records"),
                    ("import_topic", "Import records into a topic"),
                ],
                max_length=32,
            ),
        ),
    ]
