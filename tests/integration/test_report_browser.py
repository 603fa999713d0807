"""The browser checks of tests/integration/browser.py catch what they are there for: a script's console error, a
request off the page, an external URL. (The reports themselves are looked at where the runs that write them are:
test_upgrade_flow for a GPU Operator canary and an 8-node promotion, test_fault_matrix for a MOFED rollout and a
halted NIC firmware rollout.)"""

from __future__ import annotations

import pathlib

from .browser import problems, render


def test_a_page_with_a_script_and_a_remote_image_fails_the_checks(tmp_path: pathlib.Path) -> None:
    page = tmp_path / "bad.html"
    # Port 9 (discard) on the loopback: refused at once, nothing leaves the machine.
    page.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>'
        '<img src="http://127.0.0.1:9/x.png"><script>console.error("boom")</script><p>x</p></body></html>'
    )
    found = problems(render(page, name="browser-check-bad-page"), page)
    assert "console: boom" in found
    assert "request: http://127.0.0.1:9/x.png" in found
    assert any(item.startswith("external reference: src=") for item in found)
