"""The approval requests' part in a run's life: the loop's approval gate, the
decisions, lapses and expiry, the policy save, the reviewers' queue, and whether a
push's base moved since it was asked."""
