from django.db import models


class GlobalSwitch(models.Model):
    """The global kill switch: one row. ``stop_all`` kills every active run (and any
    run that starts while it is on); ``admit_new`` refuses new runs when off."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    stop_all = models.BooleanField(default=False)
    admit_new = models.BooleanField(default=True)
    changed_by = models.CharField(max_length=150, blank=True, default="")
    changed_at = models.DateTimeField(auto_now=True)

    class Meta:
        permissions = [("operate_runs", "Can kill runs and use the global kill switch")]

    @classmethod
    def get(cls) -> "GlobalSwitch":
        switch, _ = cls.objects.get_or_create(pk=1)
        return switch
