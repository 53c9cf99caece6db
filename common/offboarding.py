"""What sign-in says when it offboards someone (signin.groups.offboard: the provider
refused a person Harness knows): the apps that hold a way in of theirs end it. A
signal, because those apps (api: its tokens) sit beside signin in the layers, and
neither imports the other. Sent with ``user`` and ``reason`` (said to the person);
each receiver returns how many ways in it ended, for the audit."""

from __future__ import annotations

from django.dispatch import Signal

offboarded = Signal()
