"""The local mail catcher `make up` starts: an SMTP server on loopback (aiosmtpd) that
delivers nothing and keeps each mail it receives as a file, and a page that shows
them, newest first, so the demo's mail can be read without a mail account.

    python3 scripts/mail_catcher.py --smtp-port 8025 --http-port 8026 --dir var/mail

For trying Harness locally, never a relay: it listens on 127.0.0.1 only, keeps the
newest KEPT mails and shows each body up to SHOWN_CHARS characters (the rest is
counted, not dropped silently)."""

from __future__ import annotations

import argparse
import email
import html
import signal
import time
from email import policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller

KEPT = 200
SHOWN_CHARS = 20_000
# A mail larger than this is refused by the server (552), never half kept.
MAX_BYTES = 1_000_000
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Mail caught locally</title>
<style>
body {{ font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; padding: 16px; max-width: 60rem; color: #111827; background: #f8fafc; }}
article {{ background: #fff; border: 1px solid #cbd5e1; border-radius: 8px; padding: 12px 14px; margin: 12px 0; }}
dl {{ display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0 0 8px; }}
dt {{ color: #475569; }} dd {{ margin: 0; overflow-wrap: anywhere; }}
pre {{ white-space: pre-wrap; overflow-wrap: anywhere; background: #f1f5f9; padding: 8px; border-radius: 6px; margin: 0; }}
.muted {{ color: #475569; }}
</style></head>
<body><main>
<h1>Mail caught locally</h1>
<p class="muted">What Harness sent while <code>make up</code> runs: kept at {folder}, the newest {kept}, newest first. Nothing here was delivered to anyone.</p>
{mails}
</main></body></html>
"""


def keep(folder: Path, content: bytes, recipients: list[str]) -> Path:
    """Store one mail (with whom it was for) and drop the oldest beyond KEPT."""
    path = folder / f"{time.time_ns()}.eml"
    path.write_bytes(b"X-Envelope-To: " + ", ".join(recipients).encode() + b"\r\n" + content)
    for old in sorted(folder.glob("*.eml"))[:-KEPT]:
        old.unlink(missing_ok=True)
    return path


def body_of(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    text = part.get_content() if part is not None else ""
    if len(text) > SHOWN_CHARS:
        return f"{text[:SHOWN_CHARS]}\n… {len(text) - SHOWN_CHARS} more characters"
    return str(text)


def shown(path: Path) -> str:
    message = email.message_from_bytes(path.read_bytes(), policy=policy.default)
    assert isinstance(message, EmailMessage)
    rows = "".join(
        f"<dt>{name}</dt><dd>{html.escape(str(message.get(header, '')))}</dd>"
        for name, header in (("To", "X-Envelope-To"), ("From", "From"), ("Date", "Date"), ("Subject", "Subject"))
    )
    subject = html.escape(str(message.get("Subject", "(no subject)")))
    return f'<article aria-label="{subject}"><dl>{rows}</dl><pre>{html.escape(body_of(message))}</pre></article>'


def page(folder: Path) -> str:
    found = sorted(folder.glob("*.eml"), reverse=True)
    mails = "".join(shown(path) for path in found) or '<p id="no-mail">No mail yet.</p>'
    return PAGE.format(folder=html.escape(str(folder)), kept=KEPT, mails=mails)


class Keeper:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        keep(self.folder, envelope.content, list(envelope.rcpt_tos))
        return "250 OK: caught, not delivered"


def stop(*_: object) -> None:
    # make down (or a test) ends the catcher with SIGTERM: both servers then close cleanly.
    raise KeyboardInterrupt


def serve(folder: Path, smtp_port: int, http_port: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    smtp = Controller(Keeper(folder), hostname="127.0.0.1", port=smtp_port, data_size_limit=MAX_BYTES)
    smtp.start()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's hook name
            if self.path.split("?")[0] != "/":
                self.send_error(404, "only / is here: the mails caught")
                return
            body = page(folder).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the page is read often; its requests are no news

    web = ThreadingHTTPServer(("127.0.0.1", http_port), Handler)
    signal.signal(signal.SIGTERM, stop)
    print(f"mail catcher: SMTP 127.0.0.1:{smtp_port}, page http://127.0.0.1:{http_port}/, kept in {folder}", flush=True)
    try:
        web.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        web.server_close()
        smtp.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smtp-port", type=int, default=8025)
    parser.add_argument("--http-port", type=int, default=8026)
    parser.add_argument("--dir", type=Path, required=True, help="where the mails are kept")
    args = parser.parse_args()
    serve(args.dir, args.smtp_port, args.http_port)


if __name__ == "__main__":
    main()
