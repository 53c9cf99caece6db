from django.apps import AppConfig


class SiteAdminConfig(AppConfig):
    name = "site_admin"
    verbose_name = "Harness admin pages"
