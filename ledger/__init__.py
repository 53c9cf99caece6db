"""The decision ledger (docs/design.md, Decision ledger): every decision, who or
which rule made it and the digest of exactly what they were shown, chained by digests
in one global chain and one per project. ``ledger.verify`` is plain Python (an export
is checked offline with it alone); the rest is the Django app that writes and exports
the chain. It sits between common and projects, and addresses runs and projects by
their ids, so every app that decides something can record it."""
