"""What the proxy in the worker (``sandbox.egress.proxy``) and the relay in the
container (sandbox/image/harness/relay.py, run as the sandbox user beside the check)
say to each other over the relay's standard input and output. The relay listens on
the container's own loopback and carries each connection's bytes to the proxy; it
decides nothing: whatever it sends, the proxy checks against the check's policy, and
so would anything else a check wrote into the stream.

Frames both ways: connection id (4 bytes), kind (1), length (4), then the bytes; the
relay keeps its own copy of these values (it runs with nothing but the standard
library), which tests/test_sandbox_programs.py holds to these.

The relay also answers DNS on the container's loopback port 53 (UDP, the container's
only resolver): every lookup is refused, since names resolve only through the proxy,
and each query goes to the proxy as a DNS frame, so the attempt is recorded.
The container keeps ``network=none`` under runc and runsc alike: the relay's stdio is
its only way out, and the proxy the only thing at the other end."""

from __future__ import annotations

import struct

FRAME = struct.Struct(">IBI")
READY, OPEN, DATA, CLOSE, DNS = 1, 2, 3, 4, 5
MAX_FRAME = 1 << 20
# The relay, a file of the image beside the container's other programs
# (sandbox.container.spec.PROGRAMS), run with the image's python3.
RELAY = "/opt/harness/relay.py"
