"""Screenshots of the console's pages, and the browser plumbing the console's browser tests share.

``python scripts/console_screenshots.py [OUT_DIR]`` (from the repository root) starts a private embedded
stack and hub (hash embedder: no model to load), writes a small team memory through :class:`RecallClient`,
serves the console on a free loopback port and saves its main pages as 1366×768 PNGs into
``docs/screenshots/`` (or OUT_DIR).

It drives Debian's headless Chromium through Selenium (``apt-get install chromium chromium-driver``;
``pip install selenium``, part of the ``test`` extra)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from recall_hub.tooling.stack import free_port

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver
    from starlette.applications import Starlette

WIDTH, HEIGHT = 1366, 768
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DRIVERS = ("chromedriver", "/usr/lib/chromium/chromedriver", "/usr/lib/chromium-browser/chromedriver")
INSTALL_HINT = "apt-get install chromium chromium-driver"


def find_chromium() -> tuple[str, str] | None:
    """The paths of a Chromium (or Chrome) binary and of its chromedriver, or None when either is missing.
    ``RECALL_CHROMIUM`` and ``RECALL_CHROMEDRIVER`` name them explicitly."""
    named = os.environ.get("RECALL_CHROMIUM"), os.environ.get("RECALL_CHROMEDRIVER")
    browser = shutil.which(named[0]) if named[0] else next(filter(None, map(shutil.which, BROWSERS)), None)
    driver = shutil.which(named[1]) if named[1] else next(filter(None, map(shutil.which, DRIVERS)), None)
    if not browser or not driver:
        return None
    return browser, driver


def headless_chrome(width: int = WIDTH, height: int = HEIGHT) -> WebDriver:
    """A headless Chromium whose viewport is exactly ``width``×``height`` CSS pixels at scale 1. Runs as
    root too (no sandbox) and in small containers (no /dev/shm)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = find_chromium()
    if found is None:
        raise RuntimeError(f"no Chromium with chromedriver found: {INSTALL_HINT}")
    browser, driver_path = found
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        f"--window-size={width},{height}",
        "--force-color-profile=srgb",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    # The window's size includes the browser's own bars; pin the page's viewport instead.
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )
    return driver


class ConsoleServer:
    """The console app served by uvicorn on a free loopback port, in a thread with its own event loop, so
    a blocked caller (a browser driver waiting for a page) never stalls it. A context manager."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1", start_timeout: float = 60.0) -> None:
        import uvicorn

        self.port = free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.start_timeout = start_timeout
        config = uvicorn.Config(app, host=host, port=self.port, log_level="warning", lifespan="on",
                                timeout_graceful_shutdown=5)  # an open event stream must not hold the stop
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="recall-console", daemon=True)

    def start(self) -> ConsoleServer:
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the console stopped before it served (see the log above)")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the console did not serve {self.url} within {self.start_timeout} s")
            self.thread.join(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)

    def __enter__(self) -> ConsoleServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def wait_for(driver: WebDriver, condition: Callable[[Any], Any], timeout: float = 20.0, what: str = "") -> Any:
    """``WebDriverWait(driver, timeout).until(condition)``, with a message naming what was awaited."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(condition, message=what)


# --- a small team memory to show ----------------------------------------------------------------------

OPS, BACKEND, FRONTEND, REVIEWER = "o_maya", "a_devon", "a_priya", "a_kenji"
TEAM = (OPS, BACKEND, FRONTEND, REVIEWER)

TOPICS = {
    "migration": "Payments provider migration",
    "latency": "Checkout latency",
    "release": "Release 2.4",
    "oncall": "On-call and incidents",
}

# key, topic, bead type, author, title, content, tags, importance
BEADS: list[tuple[str, str, str, str, str, str, list[str], int]] = [
    ("m1", "migration", "decision", OPS, "Move card payments to the new provider by June",
     "The old provider's contract ends June 30; the new one charges 0.4% less per transaction.",
     ["payments", "provider"], 9),
    ("m2", "migration", "finding", BACKEND, "New provider's API is idempotent by request key",
     "Every POST /charges takes an Idempotency-Key header; a retried charge returns the first result.",
     ["payments", "api"], 7),
    ("m3", "migration", "todo", BACKEND, "Map refund reasons to the new provider's codes",
     "Our 14 refund reasons collapse to 6 codes; 'duplicate' and 'fraud' need a manual review flag.",
     ["payments", "refunds"], 6),
    ("m4", "migration", "decision", OPS, "Run both providers side by side for two weeks",
     "5% of traffic goes to the new provider first, then 50%, then all; the old one stays as fallback.",
     ["payments", "rollout"], 8),
    ("m5", "migration", "observation", BACKEND, "Sandbox webhooks arrive out of order",
     "charge.succeeded sometimes arrives before charge.created; handlers must not assume order.",
     ["payments", "webhooks"], 7),
    ("m6", "migration", "fact", BACKEND, "Webhook signatures use HMAC-SHA256 with a rotating secret",
     "Two secrets are valid during a rotation; verify against both.",
     ["payments", "webhooks", "security"], 6),
    ("m7", "migration", "question", FRONTEND, "Do saved cards move over without asking customers again?",
     "Card tokens are provider-specific; the provider offers a token migration file.",
     ["payments", "cards"], 5),
    ("m8", "migration", "finding", REVIEWER, "Token migration keeps 97% of saved cards",
     "Cards whose issuer refuses network tokens (3%) must be entered again at the next checkout.",
     ["payments", "cards"], 7),
    ("m9", "migration", "todo", FRONTEND, "Show a 're-enter your card' notice for unmigrated cards",
     "Only for the 3% whose token did not migrate; link to the help article.",
     ["payments", "cards", "ui"], 5),
    ("m10", "migration", "decision", OPS, "Fallback to the old provider only on timeouts, never on declines",
     "A decline retried elsewhere looks like card testing to the issuer.",
     ["payments", "rollout"], 8),
    ("m11", "migration", "note", REVIEWER, "Reviewed the charge adapter: retries reuse the idempotency key",
     "PR 'charge adapter' is fine; one nit about logging the full card fingerprint.",
     ["payments", "review"], 4),
    ("m12", "migration", "summary", OPS, "Migration status: 50% of traffic on the new provider",
     "No increase in declines; refunds mapped; saved-card notice live.",
     ["payments", "status"], 8),
    ("l1", "latency", "observation", BACKEND, "Checkout p99 latency doubled after the cart service upgrade",
     "p99 went from 420 ms to 910 ms on Tuesday; p50 unchanged.",
     ["latency", "checkout"], 8),
    ("l2", "latency", "finding", BACKEND, "The cart service opens a new database connection per request",
     "The upgrade reset the pool size to 1; connections are created and torn down on every call.",
     ["latency", "database"], 8),
    ("l3", "latency", "decision", OPS, "Set the cart service connection pool to 20",
     "Matches the database's per-client limit with headroom for two replicas.",
     ["latency", "database"], 7),
    ("l4", "latency", "observation", BACKEND, "p99 back to 430 ms after the pool fix",
     "Measured over 24 hours of production traffic.",
     ["latency", "checkout"], 6),
    ("l5", "latency", "finding", FRONTEND, "Address autocomplete blocks the payment form for 300 ms",
     "The autocomplete script loads synchronously in the head.",
     ["latency", "frontend"], 6),
    ("l6", "latency", "todo", FRONTEND, "Load the address autocomplete script lazily",
     "Defer it until the address field gets focus.",
     ["latency", "frontend"], 5),
    ("l7", "latency", "fact", BACKEND, "Tax calculation calls an external API on every cart change",
     "Responses are cacheable per (postcode, basket hash) for 10 minutes.",
     ["latency", "tax"], 6),
    ("l8", "latency", "decision", OPS, "Cache tax quotes for ten minutes per postcode and basket",
     "Cuts about 40% of calls to the tax API.",
     ["latency", "tax", "cache"], 7),
    ("l9", "latency", "observation", REVIEWER, "Cache hit rate for tax quotes is 62%",
     "Lower than expected because coupons change the basket hash.",
     ["latency", "cache"], 5),
    ("l10", "latency", "question", REVIEWER, "Should coupons be left out of the tax cache key?",
     "Coupons change the taxable amount in some states, so maybe not.",
     ["latency", "tax", "cache"], 4),
    ("l11", "latency", "finding", BACKEND, "Coupons change taxable amounts in 11 states",
     "They must stay in the cache key; the hit rate is what it is.",
     ["latency", "tax"], 6),
    ("l12", "latency", "summary", OPS, "Checkout latency is back under the 500 ms p99 budget",
     "Pool fix plus lazy autocomplete; tax cache helps the median.",
     ["latency", "status"], 8),
    ("r1", "release", "decision", OPS, "Release 2.4 ships on the 14th",
     "Contents: new provider at 50%, latency fixes, saved-card notice.",
     ["release"], 8),
    ("r2", "release", "todo", REVIEWER, "Write the 2.4 changelog",
     "Customer-facing wording for the saved-card notice needs support's review.",
     ["release", "docs"], 4),
    ("r3", "release", "todo", BACKEND, "Freeze database migrations for 2.4",
     "Last migration: add provider column to charges.",
     ["release", "database"], 6),
    ("r4", "release", "observation", REVIEWER, "Staging smoke tests pass except the refund flow",
     "Refund of a charge made on the old provider fails on staging.",
     ["release", "refunds"], 7),
    ("r5", "release", "finding", BACKEND, "Refunds must go to the provider that took the charge",
     "The adapter picked the current provider; it now reads the charge's provider column.",
     ["release", "refunds", "payments"], 8),
    ("r6", "release", "note", REVIEWER, "Refund flow passes on staging after the adapter fix",
     "Tested both providers, full and partial refunds.",
     ["release", "refunds"], 5),
    ("r7", "release", "decision", OPS, "Roll 2.4 out region by region, EU first",
     "EU has the lowest traffic on a Tuesday morning.",
     ["release", "rollout"], 7),
    ("r8", "release", "event", OPS, "2.4 live in the EU region",
     "No alerts in the first hour.",
     ["release"], 5),
    ("r9", "release", "event", OPS, "2.4 live in all regions",
     "Rollout finished at 16:40 UTC.",
     ["release"], 6),
    ("r10", "release", "todo", FRONTEND, "Remove the old provider's card form after 2.5",
     "Keep it until the fallback is switched off.",
     ["release", "cleanup"], 3),
    ("r11", "release", "question", FRONTEND, "Who signs off the saved-card notice wording?",
     "Support or legal?", ["release", "ui"], 3),
    ("r12", "release", "fact", OPS, "Support signs off customer-facing wording; legal only for terms",
     "Agreed in the release meeting.", ["release", "process"], 5),
    ("o1", "oncall", "event", BACKEND, "Incident: webhook backlog of 40k events",
     "The webhook consumer stalled after a deploy; charges stayed 'pending' for 25 minutes.",
     ["incident", "webhooks"], 9),
    ("o2", "oncall", "finding", BACKEND, "The webhook consumer crashed on an unknown event type",
     "charge.dispute.funds_withdrawn was new; the consumer raised and restarted in a loop.",
     ["incident", "webhooks"], 8),
    ("o3", "oncall", "decision", OPS, "Unknown webhook events are logged and acknowledged, never raised",
     "A dead-letter queue keeps them for later handling.",
     ["incident", "webhooks"], 8),
    ("o4", "oncall", "todo", BACKEND, "Alert when the webhook backlog exceeds 1,000 events",
     "Page the on-call after five minutes over the threshold.",
     ["incident", "alerting"], 7),
    ("o5", "oncall", "summary", OPS, "Postmortem: webhook backlog incident",
     "Cause: unhandled event type. Impact: 25 minutes of pending charges, no money lost. Fixes: ack unknown "
     "events, backlog alert.", ["incident", "postmortem"], 9),
    ("o6", "oncall", "fact", OPS, "On-call rotation changes every Monday at 09:00 UTC",
     "Handover happens in the on-call channel with open incidents listed.",
     ["oncall", "process"], 5),
    ("o7", "oncall", "observation", REVIEWER, "Disk on the payments database reached 80%",
     "Growth comes from the audit table; 2 GB a day.",
     ["oncall", "database"], 6),
    ("o8", "oncall", "todo", BACKEND, "Archive audit rows older than 90 days",
     "Move them to cold storage nightly.",
     ["oncall", "database"], 5),
    ("o9", "oncall", "note", FRONTEND, "Status page updated automatically during the incident",
     "The integration with the alerting tool worked as intended.",
     ["incident", "status-page"], 3),
    ("o10", "oncall", "question", REVIEWER, "Should the backlog alert page at night?",
     "Pending charges at night affect few customers.", ["oncall", "alerting"], 3),
    ("o11", "oncall", "decision", OPS, "The backlog alert pages at any hour",
     "Pending charges can become double charges when customers retry.",
     ["oncall", "alerting"], 7),
    ("o12", "oncall", "finding", REVIEWER, "Customers retry a pending checkout after about 90 seconds",
     "From the analytics of the incident window.", ["incident", "checkout"], 6),
]

# from, to, relationship type (besides every bead's PART_OF link to its topic)
LINKS = [
    ("m2", "m1", "FOLLOWS_FROM"), ("m3", "m1", "FOLLOWS_FROM"), ("m4", "m1", "FOLLOWS_FROM"),
    ("m5", "m2", "RELATED_TO"), ("m6", "m5", "RELATED_TO"), ("m8", "m7", "FOLLOWS_FROM"),
    ("m9", "m8", "FOLLOWS_FROM"), ("m10", "m4", "UPDATES"), ("m11", "m2", "RELATED_TO"),
    ("m12", "m4", "FOLLOWS_FROM"), ("m12", "m9", "RELATED_TO"),
    ("l2", "l1", "FOLLOWS_FROM"), ("l3", "l2", "FOLLOWS_FROM"), ("l4", "l3", "FOLLOWS_FROM"),
    ("l6", "l5", "FOLLOWS_FROM"), ("l8", "l7", "FOLLOWS_FROM"), ("l9", "l8", "FOLLOWS_FROM"),
    ("l10", "l9", "FOLLOWS_FROM"), ("l11", "l10", "FOLLOWS_FROM"), ("l12", "l4", "FOLLOWS_FROM"),
    ("l12", "l6", "RELATED_TO"),
    ("r1", "m12", "RELATED_TO"), ("r1", "l12", "RELATED_TO"), ("r3", "r1", "FOLLOWS_FROM"),
    ("r4", "r1", "FOLLOWS_FROM"), ("r5", "r4", "FOLLOWS_FROM"), ("r5", "m3", "RELATED_TO"),
    ("r6", "r5", "FOLLOWS_FROM"), ("r7", "r1", "UPDATES"), ("r8", "r7", "FOLLOWS_FROM"),
    ("r9", "r8", "FOLLOWS_FROM"), ("r10", "m10", "RELATED_TO"), ("r12", "r11", "FOLLOWS_FROM"),
    ("r2", "r12", "RELATED_TO"),
    ("o2", "o1", "FOLLOWS_FROM"), ("o3", "o2", "FOLLOWS_FROM"), ("o4", "o1", "FOLLOWS_FROM"),
    ("o5", "o3", "FOLLOWS_FROM"), ("o5", "o4", "RELATED_TO"), ("o1", "m5", "RELATED_TO"),
    ("o8", "o7", "FOLLOWS_FROM"), ("o9", "o1", "RELATED_TO"), ("o11", "o10", "FOLLOWS_FROM"),
    ("o11", "o4", "UPDATES"), ("o12", "o1", "RELATED_TO"), ("o11", "o12", "RELATED_TO"),
]

PRIVATE = [
    (BACKEND, "My notes: the staging database password rotates on Fridays",
     "Ask Maya for the new one in the ops channel."),
    (FRONTEND, "Draft: ideas for a one-page checkout", "Merge address and payment steps; keep the summary sticky."),
]

GRAPH_PICK = "Incident: webhook backlog of 40k events"
"""The bead selected in the graph's screenshot."""

LIVE = [
    (BACKEND, "Webhook dead-letter queue drained: 37 events replayed", "observation"),
    (REVIEWER, "Backlog alert fired in staging as expected", "observation"),
    (OPS, "Start the 2.5 planning on Thursday", "decision"),
]


async def write_team(nats_url: str) -> dict[str, str]:
    """Create the team, its group and its memory through :class:`RecallClient`; returns the group id and
    the ids of a few beads the screenshots open (``group_id``, ``bead_id``)."""
    from recall_client import RecallClient

    clients = {ai_id: await RecallClient(ai_id, nats_url).connect() for ai_id in TEAM}
    try:
        ops = clients[OPS]
        group = await ops.create_group("checkout-team")
        for ai_id in TEAM[1:]:
            await ops.add_member(group.group_id, ai_id)
        ids: dict[str, str] = {}
        for key, title in TOPICS.items():
            topic = await ops.create_bead(title, f"Everything the team knows about {title.lower()}.",
                                          bead_type="topic", group_id=group.group_id, visibility="group",
                                          importance=6)
            ids[key] = topic.bead_id
        for key, topic_key, bead_type, author, title, content, tags, importance in BEADS:
            bead = await clients[author].create_bead(
                title, content, bead_type=bead_type, tags=tags, importance=importance,
                group_id=group.group_id, visibility="group")
            ids[key] = bead.bead_id
            await clients[author].add_relationship(bead.bead_id, ids[topic_key], "PART_OF")
        for source, target, rel_type in LINKS:
            await ops.add_relationship(ids[source], ids[target], rel_type)
        for author, title, content in PRIVATE:
            await clients[author].create_bead(title, content, bead_type="note", visibility="private")
        await ops.create_bead("Payments runbook lives in the ops wiki", "Linked from every alert.",
                              bead_type="fact", visibility="global", tags=["runbook"])
        await ops.transfer_ops(
            group.group_id, BACKEND,
            "Handing ops to Devon while I am away: 2.4 is live everywhere, the webhook backlog alert is in "
            "place, the provider migration sits at 50% of traffic.",
            bead_ids=[ids["m12"], ids["l12"], ids["o5"], ids["r9"]])
        return {"group_id": group.group_id, "bead_id": ids["o5"]}
    finally:
        for client in clients.values():
            await client.close()


# --- the screenshots ---------------------------------------------------------------------------------


def _sign_in(driver: WebDriver, base: str, ai_id: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/login")
    driver.delete_all_cookies()
    driver.get(f"{base}/login")
    driver.find_element(By.CSS_SELECTOR, "input[name=ai_id]").send_keys(ai_id)
    driver.find_element(By.CSS_SELECTOR, "form[action='/login'] button[type=submit]").click()
    wait_for(driver, lambda d: d.current_url.endswith("/groups"), what=f"signed in as {ai_id}")


def _text(driver: WebDriver, css: str) -> str:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        return driver.find_element(By.CSS_SELECTOR, css).text
    except (NoSuchElementException, StaleElementReferenceException):
        return ""


def _scroll_to(driver: WebDriver, css: str) -> None:
    driver.execute_script(
        "var el = document.querySelector(arguments[0]); window.scrollTo(0, el.getBoundingClientRect().top"
        " + window.scrollY - 12);", css)


class Shooter:
    """Saves the pages of one console, signed in as one identity, into ``out_dir``."""

    def __init__(self, base: str, out_dir: Path, driver: WebDriver) -> None:
        self.base, self.out_dir, self.driver = base, out_dir, driver
        self.saved: list[Path] = []

    def save(self, name: str) -> None:
        path = self.out_dir / f"{name}.png"
        self.driver.execute_script("document.activeElement && document.activeElement.blur && "
                                   "document.activeElement.blur();")  # no focus ring or caret in the picture
        self.driver.save_screenshot(str(path))
        self.saved.append(path)

    def login(self) -> None:
        from selenium.webdriver.common.by import By

        self.driver.get(f"{self.base}/login")
        self.driver.delete_all_cookies()
        self.driver.get(f"{self.base}/login")
        self.driver.find_element(By.CSS_SELECTOR, "input[name=ai_id]").send_keys(BACKEND)
        self.save("login")

    def pages(self, group_id: str, bead_id: str) -> None:
        _sign_in(self.driver, self.base, BACKEND)
        self.save("groups")
        self.graph(group_id)
        self.driver.get(f"{self.base}/search?q=webhook+backlog+alert")
        wait_for(self.driver, lambda d: _text(d, "#h-hits").startswith("Hits"), what="search hits")
        self.save("search")
        self.driver.get(f"{self.base}/beads/{bead_id}")
        wait_for(self.driver, lambda d: _text(d, "main h1") != "", what="the bead page")
        self.save("bead")
        self.driver.get(f"{self.base}/handoffs?group={group_id}")
        wait_for(self.driver, lambda d: _text(d, "#h-latest") != "", what="the handoffs page")
        self.save("handoffs")

    def graph(self, group_id: str) -> None:
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.by import By

        driver = self.driver
        driver.get(f"{self.base}/groups/{group_id}/graph")
        wait_for(driver, lambda d: "relationships" in _text(d, "#graph-status"), what="the graph")
        _scroll_to(driver, ".legend")  # the legend, the status line and the whole graph
        container = driver.find_element(By.ID, "graph")
        # Click the incident, as a person exploring the graph would (the detail panel opens beside it).
        target = driver.execute_script(
            "var el = document.getElementById('graph'), cy = window.recallGraph, want = arguments[0];"
            "var n = cy.nodes().filter(function (n) { return n.data('label') === want; })[0];"
            "var p = n.renderedPosition();"
            "return {x: p.x, y: p.y, width: el.clientWidth, height: el.clientHeight, label: n.data('label')};",
            GRAPH_PICK)
        ActionChains(driver).move_to_element_with_offset(
            container, round(target["x"] - target["width"] / 2), round(target["y"] - target["height"] / 2)
        ).click().perform()
        wait_for(driver, lambda d: _text(d, "#panel-title") == target["label"], what="the selected bead's panel")
        self.save("graph")

    def open_feed(self, group_id: str) -> None:
        self.driver.get(f"{self.base}/feed/{group_id}")
        wait_for(self.driver, lambda d: _text(d, "#feed-status").startswith("Live"), what="the live feed")

    def feed_shows(self, titles: list[str]) -> None:
        wait_for(self.driver, lambda d: all(t in _text(d, "#feed") for t in titles), what="the live changes")
        self.driver.execute_script(  # the newest changes at the bottom of the window
            "var items = document.querySelectorAll('#feed li');"
            "items[items.length - 1].scrollIntoView({block: 'end'});")
        self.save("feed")
        self.driver.get("about:blank")  # closes the event stream


async def capture(out_dir: Path, work_dir: Path) -> list[Path]:
    """Start a private stack, hub and console under ``work_dir``, write the team memory, and save the pages
    into ``out_dir``."""
    from recall_client import RecallClient
    from recall_hub.config import HubSettings
    from recall_hub.console import create_app
    from recall_hub.embedders import EmbedderConfig
    from recall_hub.service.server import running_hub
    from recall_hub.tooling.stack import EmbeddedStack

    with EmbeddedStack(work_dir / "stack") as stack:
        settings = HubSettings(
            nats_url=stack.nats_url, falkordb_url=stack.redis_url, redis_url=stack.redis_url,
            graph_name="console_screenshots", embedder=EmbedderConfig(kind="hash"),
        )
        async with running_hub(settings):
            team = await write_team(stack.nats_url)
            server = ConsoleServer(create_app(stack.nats_url, dev=True))
            await asyncio.to_thread(server.start)
            driver = await asyncio.to_thread(headless_chrome)
            try:
                shooter = Shooter(server.url, out_dir, driver)
                await asyncio.to_thread(shooter.login)
                await asyncio.to_thread(shooter.pages, team["group_id"], team["bead_id"])
                await asyncio.to_thread(shooter.open_feed, team["group_id"])
                for author, title, bead_type in LIVE:  # while the feed page is open
                    async with RecallClient(author, stack.nats_url) as client:
                        await client.create_bead(title, bead_type=bead_type, group_id=team["group_id"],
                                                 visibility="group")
                await asyncio.to_thread(shooter.feed_shows, [title for _, title, _ in LIVE])
            finally:
                await asyncio.to_thread(driver.quit)
                await asyncio.to_thread(server.stop)
    return shooter.saved


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("out_dir", nargs="?", type=Path, default=Path("docs/screenshots"),
                        help="where the PNGs go (default: docs/screenshots)")
    args = parser.parse_args(argv)
    if find_chromium() is None:
        raise SystemExit(f"no Chromium with chromedriver found: {INSTALL_HINT}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="recall-screenshots-") as work:
        saved = asyncio.run(capture(args.out_dir, Path(work)))
    for path in saved:
        print(f"{path} ({path.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
