"""The scraper (:mod:`xpushare.evidence.scrape_capture`): the captures it stores are byte for byte the ones the
backends stored before it owned the fetch, and the node scripts that embed its curl words run the same curl."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import cast

import pytest

from xpushare.backends import scheduler_proc
from xpushare.evidence import scrape_capture as sc
from xpushare.model.errors import HostUnreachable
from xpushare.soak.ops import node_script
from xpushare.transport.base import CommandResult, Host

PAGE = "# HELP xpushare_nvml_up NVML\n# TYPE xpushare_nvml_up gauge\nxpushare_nvml_up 1\n\nHTTP_CODE=200\n"


class _Canned:
    """A host whose every command returns one canned result, or raises ``error``."""

    def __init__(self, stdout: str = "", stderr: str = "", exit_code: int = 0,
                 error: Exception | None = None) -> None:
        self.result = CommandResult("g", (), stdout, stderr, exit_code, 0.1)
        self.error = error
        self.calls: list[tuple[list[str], float | None]] = []

    def run(self, argv: list[str], *, timeout: float | None = None, **_: object) -> CommandResult:
        self.calls.append((list(argv), timeout))
        if self.error is not None:
            raise self.error
        return self.result


def _host(canned: _Canned) -> Host:
    return cast(Host, canned)


URL = "http://127.0.0.22:9402/metrics"
ARGV = ["curl", "-sS", "-m", "10", "-o", "-", "-w", "\\nHTTP_CODE=%{http_code}\\n", URL]


def test_the_k8s_capture_is_curls_stdout_with_a_note_only_when_curl_failed() -> None:
    ok = _Canned(PAGE, "login-shell noise\n", 0)
    assert sc.capture_on(_host(ok), "g", URL) == PAGE
    assert ok.calls == [(ARGV, 30.0)]
    failed = _Canned("\nHTTP_CODE=000\n", "curl: (7) refused\nmore\n", 7)
    assert sc.capture_on(_host(failed), "g", URL) == "\nHTTP_CODE=000\n\n# curl: exit 7: curl: (7) refused | more"
    down = _Canned(error=HostUnreachable("g", "ssh: no route"))
    text = sc.capture_on(_host(down), "g", URL)
    assert text.startswith(f"# scrape of {URL} from g failed: ") and text.endswith("\nHTTP_CODE=000\n")
    assert sc.split_capture(text)[1] and sc.split_trailer(text)[1] == 0


def test_the_host_capture_keeps_stderr_and_the_status_reads_the_trailer() -> None:
    assert sc.raw_capture_on(_host(_Canned(PAGE, "warn\n", 0)), URL) == PAGE + "warn\n"
    with pytest.raises(HostUnreachable):
        sc.raw_capture_on(_host(_Canned(error=HostUnreachable("g", "down"))), URL)
    health = _Canned("ok\n\nHTTP_CODE=200\n")
    assert sc.status_on(_host(health), "http://127.0.0.1:9402/healthz", timeout_s=5) == 200
    assert health.calls[0][0][:4] == ["curl", "-sS", "-m", "5"] and health.calls[0][1] == 30.0
    assert sc.status_on(_host(_Canned("\nHTTP_CODE=000\n", "", 7)), URL) == 0
    assert sc.status_on(_host(_Canned("", "", 127)), URL) == 0  # no curl: no trailer


def test_urls() -> None:
    assert sc.endpoint_url("10.1.0.1", 9402) == "http://10.1.0.1:9402"
    assert sc.endpoint_url("10.1.0.1", 9402, "/healthz") == "http://10.1.0.1:9402/healthz"
    assert sc.base_url_of("http://h:9402/metrics/") == sc.base_url_of("http://h:9402/healthz") == "http://h:9402"
    assert sc.curl_argv(URL, 10, trailer=sc.CODE_TRAILER) == ARGV == sc.curl_capture_argv(URL)


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs sh")
def test_node_scripts_run_the_scrapers_curl(tmp_path: Path) -> None:
    """The node scripts get curl's words from the scraper; run with a stand-in ``curl`` that prints its argv, they
    GET each URL with the scraper's options and trailer (stderr kept in the scheduler sampling's stdout)."""
    fake = tmp_path / "curl"
    fake.write_text('#!/bin/sh\nprintf "[%s]" "$@"; echo; echo err >&2\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}

    def run(argv: list[str]) -> str:
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30, check=True).stdout

    base = "http://127.0.0.9:9402"
    out = run(scheduler_proc.argv("no-such-scheduler-binary", base + "/healthz", base + "/metrics"))
    words = "[-sS][-m][10][-o][-][-w][\\nHTTP_CODE=%{http_code}\\n]"
    assert out == f"@@HEALTH\n{words}[{base}/healthz]\nerr\n@@METRICS\n{words}[{base}/metrics]\nerr\n@@END\n"
    out = run(node_script("no-such-scheduler-binary", base + "/metrics"))
    full = "[-sS][-m][10][-o][-][-w][\\nHTTP_CODE=%{http_code}\\nCONTENT_TYPE=%{content_type}\\n]"
    assert out == f"@@METRICS\n{full}[{base}/metrics]\n@@END\n"


def test_scrape_facts_read_a_page_through_the_one_parser() -> None:
    page = ('xpushare_client_info{namespace="ns",pod="p-1",host_pid="9"} 1\n'
            'xpushare_gpu_memory_used_bytes{gpu_uuid="GPU-1"} 5\nHTTP_CODE=200\n')
    facts = sc.scrape_facts(page)
    assert facts.ok and facts.http_code == 200 and facts.client_info == (("ns", "p-1"),)
    assert facts.client_pids == (9,) and facts.gpu_used_sum == 5.0 and facts.series_total == 2
    assert sc.scrape_facts("nope\nHTTP_CODE=404\n") == sc.ScrapeFacts(ok=False, http_code=404)
    assert sc.scrape_facts(None) == sc.ScrapeFacts(ok=False)
