"""What the admin's autodiscovery imports: each module registers its pages."""

from site_admin import mcp_servers, policies, projects  # noqa: F401 - imported for their registrations
