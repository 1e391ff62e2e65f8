"""The dashboard's browser tests: Debian's Chromium driven by Playwright, errors and screenshots kept.

Chromium comes from the system (``scripts/setup.sh`` installs Debian's package): Playwright's own browser
download does not work here. A missing browser fails these tests; REGROUP_SKIP_BROWSER=1 skips them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = os.environ.get("REGROUP_CHROMIUM", "/usr/bin/chromium")
#: Screenshots of every browser test land here (ignored by git); each test prints where.
ARTIFACTS = Path(__file__).parent / "artifacts"


def _skip_or_fail(why: str) -> None:
    if os.environ.get("REGROUP_SKIP_BROWSER") == "1":
        pytest.skip(f"{why} (REGROUP_SKIP_BROWSER=1)")
    pytest.fail(f"{why}: run scripts/setup.sh (as root it installs Debian's chromium), "
                "or set REGROUP_SKIP_BROWSER=1 to skip the browser tests", pytrace=False)


# Module scope, not session: Playwright's sync API keeps an event loop running in the main thread
# while it is started, and any later test on the same xdist worker that calls asyncio.run() fails
# ("cannot be called from a running event loop").
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _skip_or_fail("playwright is not installed")
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which(CHROMIUM)):
        _skip_or_fail(f"no Chromium at {CHROMIUM}")
    with sync_playwright() as pw:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@dataclass
class Tab:
    """A page and everything it reported as going wrong."""

    page: Page
    shots: Path
    errors: list[str] = field(default_factory=list)

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")
        return path


@pytest.fixture
def tab(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Tab]:
    shots = ARTIFACTS / request.node.name
    shots.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    t = Tab(page, shots)

    def on_console(msg: Any) -> None:
        if msg.type == "error":
            t.errors.append(f"console: {msg.text} at {msg.location}")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: t.errors.append(f"pageerror: {exc}"))
    yield t
    # Closed before the coordinator stops, so that its going away is not an error of the page.
    context.close()
