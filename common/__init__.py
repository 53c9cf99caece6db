"""What every app of the site shares, below all of them: plain modules, not a Django
app (no models, no migrations), importing Django but none of the apps.

- ``common.permissions``: the permission names the server checks, spelled once.
- ``common.redact``: secret masking, and the column types that mask on every write.
- ``common.times``: how a moment is shown, on the pages and in the admin.
- ``common.signin``: the sign-in throttle of the pages, the admin and the API.

The apps above (approvals, runs, notifications, the API, the site) import these; a
module here that needed one of them would belong in that app instead."""
