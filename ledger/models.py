"""The ledger's rows: its entries, each chain's head, and the content each entry's
``shown`` digest covers (kept until retention forgets it; the digests stay)."""

from __future__ import annotations

from typing import Any

from django.db import models

GLOBAL_CHAIN = "global"


def project_chain(project_id: int) -> str:
    return f"project:{project_id}"


class ChainSeq(models.BigIntegerField):
    """An entry's place in the global chain, its primary key. On SQLite declared
    ``integer`` (Django's ``bigint`` is not): an INTEGER PRIMARY KEY is the table's rowid,
    so an entry's insert writes no separate key, no unique index on its seq and no
    AUTOINCREMENT counter (the ``id`` before it cost an entry some 10,000 instructions
    in sqlite_sequence alone, docs/performance-history.md, 2026-12-07); SQLite's
    integers are 64-bit either way."""

    def db_type(self, connection: Any) -> str | None:
        if connection.vendor == "sqlite":
            return "integer"
        return super().db_type(connection)


class Head(models.Model):
    """Where a chain ends: its last entry's seq and digest. Every writer of a chain
    claims this row (a conditional UPDATE, which holds its row lock to the end of the
    transaction) before numbering entries, so the chain's writers are ordered one
    after another and each links to the entry the one before it wrote."""

    chain = models.CharField(max_length=40, primary_key=True)
    seq = models.BigIntegerField(default=0)
    digest = models.CharField(max_length=64, blank=True, default="")

    def __str__(self) -> str:
        return f"{self.chain} at {self.seq}"


class Entry(models.Model):
    """One decision. ``seq``/``prev`` place it in the global chain, ``project_seq``/
    ``project_prev`` in its project's (none for a decision of no project); ``digest`` is
    over every field (ledger.verify.HASHED). Written once by ledger.writer.record and
    never changed; runs and projects are named by id, so the entry outlives them."""

    class ActorKind(models.TextChoices):
        USER = "user"
        TOKEN = "token"  # noqa: S105 - a kind of actor, no secret
        RULE = "rule"
        SYSTEM = "system"

    seq = ChainSeq(primary_key=True)
    prev = models.CharField(max_length=64, blank=True)
    project_id = models.BigIntegerField(null=True, blank=True)
    project_seq = models.BigIntegerField(null=True, blank=True)
    project_prev = models.CharField(max_length=64, null=True, blank=True)
    at = models.DateTimeField()
    actor_kind = models.CharField(max_length=10, choices=ActorKind.choices)
    actor = models.CharField(max_length=200)
    actor_id = models.CharField(max_length=80, blank=True, default="")
    policy_version = models.PositiveIntegerField(null=True, blank=True)
    run_id = models.CharField(max_length=36, blank=True, default="")
    kind = models.CharField(max_length=60)
    # What was decided, as the canonical JSON text the digest covers (no database's
    # JSON type rewrites it).
    decided = models.TextField()
    shown = models.CharField(max_length=64)
    digest = models.CharField(max_length=64)

    class Meta:
        ordering = ["seq"]
        # The indexes its readers need and no more: every entry's insert writes each
        # one. ``seq``, the key, for the export and verification in the global chain's order;
        # (project, project_seq) for a project's chain, its export and its ledger page,
        # whose filters (actor, run, kind) read within one project. A digest is unique
        # without an index (it covers ``seq``), and nothing looks an entry up by it.
        constraints = [models.UniqueConstraint(fields=["project_id", "project_seq"], name="ledger_entry_unique_project_seq")]
        verbose_name_plural = "entries"

    def __str__(self) -> str:
        return f"{self.seq} {self.kind} by {self.actor}"


class Content(models.Model):
    """What a decider was shown, as the canonical bytes (UTF-8 text) its entries'
    ``shown`` digest is over; one row per content, however many entries name it."""

    digest = models.CharField(max_length=64, primary_key=True)
    body = models.TextField()
    kept_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return self.digest
