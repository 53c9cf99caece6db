"""A run's record: the event writer and its log, checkpoints and the store the core
writes through, the rows' own statements, artifacts and their backends, the outbox
and published patches, retention, and the doorbell that tells live viewers a commit
landed."""
