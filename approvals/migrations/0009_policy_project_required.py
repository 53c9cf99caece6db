# After 0008 moved every row into a project, in a transaction of its own (0007).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("approvals", "0008_policies_into_projects")]

    operations = [
        # Not null: every row has its project by now.
        migrations.AlterField(
            model_name="policyversion",
            name="project",
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="policies", to="projects.project"),
        ),
        migrations.AddConstraint(
            model_name="policyversion",
            constraint=models.UniqueConstraint(fields=("project", "version"), name="policy_version_unique_per_project"),
        ),
    ]
