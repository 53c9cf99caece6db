"""The dashboard's pages, one module per area. Each view checks the permission,
calls plain functions and renders; the decisions live in the services."""
