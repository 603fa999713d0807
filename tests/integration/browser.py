"""The HTML reports in a real browser: headless Chromium (Debian's ``chromium``) renders a report and the tests
check what a person would see, and that the page stayed offline.

``scripts/ensure_chromium`` finds Chromium or installs Debian's package (root, apt-get); where it cannot, the
checks skip, saying why. Each check runs Chromium twice on the file: ``--dump-dom`` (the DOM after layout, with
the console logged to stderr by ``--enable-logging=stderr``, and every request it made in a NetLog by
``--log-net-log``) and ``--screenshot``, kept under tests/output/reports/ as the test's artifact.
"""

from __future__ import annotations

import functools
import json
import pathlib
import re
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "tests" / "output" / "reports"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
# Console messages as Chromium logs them with --enable-logging=stderr: `...:INFO:CONSOLE(12)] "text", source: ...`
# (console.error, uncaught errors and Content-Security-Policy refusals are all console messages).
CONSOLE = re.compile(r':(INFO|WARNING|ERROR|VERBOSE\d*):CONSOLE[^\]]*\]\s*"(?P<text>.*)", source: (?P<source>.*)$')
EXTERNAL = re.compile(
    r"""(?:src|href|action|xlink:href)\s*=\s*["']?\s*(?:https?:|//|ftp:)|url\(\s*["']?\s*(?:https?:|//)"""
)


@functools.cache
def chromium() -> str:
    """The Chromium binary, installed by scripts/ensure_chromium when missing; skips the test when it cannot be."""
    found = subprocess.run(
        [str(ROOT / "scripts" / "ensure_chromium")], capture_output=True, text=True, timeout=900, check=False
    )
    path = found.stdout.strip().splitlines()[-1] if found.stdout.strip() else ""
    if found.returncode != 0 or not path:
        pytest.skip(f"no headless Chromium: {found.stderr.strip()[-500:] or 'scripts/ensure_chromium failed'}")
    return path


@dataclass
class Rendered:
    dom: str
    console: list[str]  # console messages of the page (any level)
    requests: list[str]  # every URL the page asked for
    screenshot: pathlib.Path


def _page_requests(net_log: pathlib.Path) -> list[str]:
    """URLs the page asked for, from a Chromium NetLog: the URL_REQUEST_START_JOB events made for a frame of
    the page (their network isolation key is the page's site, ``file://``). The browser's own background requests
    (time sync, accounts, dictionaries) carry other keys and are not the page's."""
    text = net_log.read_text(errors="replace").strip()
    try:
        log = json.loads(text)
    except ValueError:  # a log Chromium did not close: close it as its NetLog viewer does
        log = json.loads(text.rstrip(",") + "]}")
    start_job = log.get("constants", {}).get("logEventTypes", {}).get("URL_REQUEST_START_JOB")
    urls = []
    for event in log.get("events", []):
        params = event.get("params") or {}
        if event.get("type") == start_job and "file://" in str(params.get("network_isolation_key")):
            urls.append(str(params.get("url")))
    return urls


def render(html: pathlib.Path, *, name: str, width: int = 1000, height: int = 1600) -> Rendered:
    """Render ``html`` in headless Chromium: its DOM, console messages, requests, and a screenshot named ``name``."""
    binary = chromium()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    screenshot = SCREENSHOTS / f"{name}.png"
    url = html.resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="chromium-") as scratch:
        profile = pathlib.Path(scratch) / "profile"
        net_log = pathlib.Path(scratch) / "net-log.json"
        dump = subprocess.run(
            [
                binary,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                f"--log-net-log={net_log}",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert dump.returncode == 0, dump.stderr[-3000:]
        console = [match.group("text") for match in map(CONSOLE.search, dump.stderr.splitlines()) if match]
        requests = _page_requests(net_log) if net_log.exists() else []
        shot = subprocess.run(
            [
                binary,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                f"--screenshot={screenshot}",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert shot.returncode == 0 and screenshot.stat().st_size > 0, shot.stderr[-3000:]
    return Rendered(dom=dump.stdout, console=console, requests=requests, screenshot=screenshot)


def problems(rendered: Rendered, page: pathlib.Path) -> list[str]:
    """What is wrong with a rendered page: console messages, requests off the page, external URLs in the DOM."""
    found = [f"console: {text}" for text in rendered.console]
    own = page.resolve().as_uri()
    found += [f"request: {url}" for url in rendered.requests if url != own and not url.startswith("data:")]
    found += [f"external reference: {match.group(0)}" for match in EXTERNAL.finditer(rendered.dom)]
    return found


def count(dom: str, element: str, css_class: str) -> int:
    """Elements ``<element class="css_class" ...>`` in the DOM (the charts' lanes and samples)."""
    return len(re.findall(rf'<{element}\b[^>]*\bclass="{re.escape(css_class)}"', dom))


def lanes(dom: str) -> list[str]:
    return re.findall(r'<g\b[^>]*\bclass="lane"[^>]*\bdata-node="([^"]*)"', dom)


def assert_report_renders(
    html: pathlib.Path, *, name: str, nodes: Iterable[str], samples: int, halted: bool = False
) -> Rendered:
    """The report renders offline without a console message; a timeline lane per node in ``nodes`` (and no
    other), as many capacity points as ``samples``, and the halt marked when ``halted``."""
    text = html.read_text()
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    assert "<script" not in text.lower()
    rendered = render(html, name=name)
    assert problems(rendered, html) == []
    assert sorted(lanes(rendered.dom)) == sorted(set(nodes)), lanes(rendered.dom)
    assert count(rendered.dom, "circle", "sample") == samples
    assert (count(rendered.dom, "line", "halt") > 0) == halted
    assert 'id="next"' in rendered.dom and 'id="clock"' in rendered.dom
    return rendered


def newest_html(reports: pathlib.Path, stage: str) -> pathlib.Path:
    found = sorted(reports.glob(f"upgrade-*{stage}-*.html"), key=lambda path: path.stat().st_mtime)
    assert found, f"no {stage} HTML report in {reports}"
    return found[-1]


def timeline_nodes(entry: dict) -> list[str]:
    """The nodes of a ledger entry's timeline, in either form the component roles give it."""
    nodes = entry.get("nodes") or []
    return sorted(nodes) if isinstance(nodes, dict) else sorted({row["node"] for row in nodes})


def assert_entry_report_renders(reports: pathlib.Path, entry: dict, *, name: str) -> Rendered:
    """The HTML report of a ledger entry, found by the name its stage and cluster time give it."""
    from ansible_collections.gpufleet.upgrade.plugins.module_utils._report import report_file_name
    from ansible_collections.gpufleet.upgrade.plugins.module_utils._report_html import html_file_name
    from ansible_collections.gpufleet.upgrade.plugins.module_utils._report_timeline import capacity_samples

    markdown = report_file_name(entry["stage"], entry["recorded_at"], cluster=entry.get("cluster_name") or "")
    return assert_report_renders(
        reports / html_file_name(markdown),
        name=name,
        nodes=timeline_nodes(entry),
        samples=len(capacity_samples(entry)),
        halted=entry["outcome"] == "failed",
    )
