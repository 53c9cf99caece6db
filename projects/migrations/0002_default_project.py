"""Every installation has the default project: an existing one's runs and policies move
into it (runs and approvals migrations), and its global reviewers and operators keep
what they had there, through their groups."""

from django.db import migrations

from projects.models import DEFAULT_PROJECT, GLOBAL_ROLES


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]  # a migration's RunPython signature
    Project = apps.get_model("projects", "Project")
    Membership = apps.get_model("projects", "Membership")
    Group = apps.get_model("auth", "Group")
    project, _ = Project.objects.get_or_create(slug=DEFAULT_PROJECT, defaults={"name": "Default"})
    for role in GLOBAL_ROLES:
        group, _ = Group.objects.get_or_create(name=role)
        Membership.objects.get_or_create(project=project, group=group, role=role)


class Migration(migrations.Migration):
    dependencies = [("projects", "0001_initial"), ("auth", "0012_alter_user_first_name_max_length")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
