"""At most one queued dispatch message per capture (issue #45): ``enqueued_until``, the lease
of the message the sweep sent, read before it sends another. A nullable column without a
default: adding it rewrites nothing."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("capture", "0003_i18n_verbose_names"),
    ]

    operations = [
        migrations.AddField(
            model_name="capture",
            name="enqueued_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
