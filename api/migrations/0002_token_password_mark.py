import hashlib

from django.db import migrations, models


def mark_current_passwords(apps, schema_editor):
    """Tokens made before the mark existed are taken to match the password their user
    has now (nothing tells otherwise); from here on a change voids them."""
    api_token = apps.get_model("api", "ApiToken")
    rows = list(api_token.objects.select_related("user"))
    for row in rows:
        row.password_mark = hashlib.sha256(row.user.password.encode()).hexdigest()
    api_token.objects.bulk_update(rows, ["password_mark"])


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0001_hashed_api_tokens"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="password_mark",
            field=models.CharField(default="", help_text="a digest of the user's password hash when the token was made", max_length=64),
            preserve_default=False,
        ),
        migrations.RunPython(mark_current_passwords, migrations.RunPython.noop),
    ]
