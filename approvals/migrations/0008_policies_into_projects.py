# The rows, with the historical models, in a transaction of their own (0007).

from django.db import migrations

DEFAULT_PROJECT = "default"


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]  # a migration's RunPython signature
    """Every existing version becomes the default project's. Any other project (made
    before policies were a project's) keeps the policy that governed its runs: the
    newest version, copied under the same number, so nothing in flight goes stale
    and no project falls back to the looser default document."""
    Project = apps.get_model("projects", "Project")
    PolicyVersion = apps.get_model("approvals", "PolicyVersion")
    default, _ = Project.objects.get_or_create(slug=DEFAULT_PROJECT, defaults={"name": "Default"})
    PolicyVersion.objects.filter(project__isnull=True).update(project=default)
    newest = PolicyVersion.objects.filter(project=default).order_by("-version").first()
    if newest is None:
        return
    for project in Project.objects.exclude(pk=default.pk):
        PolicyVersion.objects.create(
            project=project,
            version=newest.version,
            document=newest.document,
            note=f"carried over from the global policy v{newest.version}",
            created_by=newest.created_by,
        )


class Migration(migrations.Migration):
    dependencies = [("approvals", "0007_project_policies")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
