"""Remote repositories and forges: URLs checked against the allowlist, git over HTTPS
or SSH with the server's credentials, change requests, and whether a base moved."""
