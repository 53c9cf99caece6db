"""The admin app with Harness's site (harness_site.admin_site), named apart from it: an
app's configuration is imported before the models it may not import yet."""

from django.contrib.admin.apps import AdminConfig


class HarnessAdminConfig(AdminConfig):
    default_site = "harness_site.admin_site.HarnessAdminSite"
