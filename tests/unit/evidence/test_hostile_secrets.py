"""Credentials never leave the place the user put them: a metrics URL's password goes to curl on its standard input
(never its command line), and is masked in debug.log and ``-v`` lines."""

from __future__ import annotations

import logging
import shutil
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from xpushare.evidence.scrape_capture import curl_fetcher, without_credentials
from xpushare.transport import command_log
from xpushare.transport.local import LocalHost


class _Auth(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.headers.get("Authorization") == "Basic dXNlcjpzM2NyM3Q="  # user:s3cr3t
        body = b"ok\n" if ok else b"who?\n"
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_metrics_url_credentials_reach_curl_on_stdin_only(tmp_path: Path) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Auth)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://user:s3cr3t@127.0.0.1:{server.server_address[1]}/metrics"
    log = tmp_path / "debug.log"
    try:
        with command_log.debug_log(log):
            status, _, body = curl_fetcher(LocalHost(), timeout_s=5)(url)
    finally:
        server.shutdown()
        server.server_close()
    assert (status, body) == (200, "ok\n")
    text = log.read_text()
    assert "s3cr3t" not in text and "127.0.0.1" in text


def test_url_passwords_are_masked_in_every_record(tmp_path: Path) -> None:
    assert without_credentials("http://127.0.0.1:9/x") == ("http://127.0.0.1:9/x", None)
    assert command_log.redact(["curl", "http://u:pw@h:1/m"]) == "curl 'http://u:***@h:1/m'"
    log = tmp_path / "debug.log"
    with command_log.debug_log(log):
        logging.getLogger("somelib").warning("GET %s failed", "https://admin:hunter2@example.invalid/")
    assert "hunter2" not in log.read_text() and "admin:***@" in log.read_text()


def test_curl_never_sees_a_password_on_its_command_line() -> None:
    seen: list[tuple[list[str], str | None]] = []

    class Seen(Exception):
        pass

    class Recorder(LocalHost):
        def run(self, argv, **kw):
            seen.append((list(argv), kw.get("stdin")))
            raise Seen

    with pytest.raises(Seen):
        curl_fetcher(Recorder(), timeout_s=1)("http://u:pw@127.0.0.1:9/m")
    argv, stdin = seen[0]
    assert not any("pw" in word for word in argv) and "-K" in argv and stdin == 'user = "u:pw"\n'
