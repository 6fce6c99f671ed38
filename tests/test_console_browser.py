"""The console in a real browser: headless Chromium driven by Selenium against the console served by
uvicorn, on the session's hub. What each identity sees, the graph, search, the live feed, and keyboard use.

Skipped when no Chromium with chromedriver is installed (``apt-get install chromium chromium-driver``).
The hub runs on the test event loop and the console on a thread of its own, so every browser step runs in
a worker thread (``asyncio.to_thread``): a blocked browser call never stalls the hub or the console."""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import urlencode

import pytest

pytest.importorskip("selenium", reason="the browser tests need selenium (the test extra)")

from recall_hub.console import create_app
from recall_hub.tooling.stack import EmbeddedStack
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from scripts.console_screenshots import INSTALL_HINT, ConsoleServer, find_chromium, headless_chrome, wait_for
from tests.conftest import ClientFactory, new_ai

if find_chromium() is None:
    pytest.skip(f"no headless Chromium with chromedriver: {INSTALL_HINT}", allow_module_level=True)

T = TypeVar("T")


# --- the console and the browser --------------------------------------------------------------------


@pytest.fixture(scope="module")
async def console(stack: EmbeddedStack, hub: object) -> AsyncIterator[ConsoleServer]:
    """The console (dev mode: the login page takes any AI id) on a free port, serving the session's hub."""
    server = ConsoleServer(create_app(stack.nats_url, dev=True))
    await asyncio.to_thread(server.start)
    yield server
    await asyncio.to_thread(server.stop)


PROBLEM_WATCH = """
window.recallProblems = [];
document.addEventListener("securitypolicyviolation", function (event) {
  window.recallProblems.push("CSP " + event.effectiveDirective + " blocked " + (event.blockedURI || "inline") +
                             " (" + event.sourceFile + ":" + event.lineNumber + ")");
});
window.addEventListener("error", function (event) {
  window.recallProblems.push("error: " + (event.message || (event.target && (event.target.src || event.target.href))));
}, true);
window.addEventListener("unhandledrejection", function (event) {
  window.recallProblems.push("unhandled rejection: " + event.reason);
});
"""
"""Run in every page before its own scripts: the Content-Security-Policy's refusals and script errors."""


@pytest.fixture(scope="module")
def browser(console: ConsoleServer) -> Iterator[WebDriver]:
    driver = headless_chrome()
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PROBLEM_WATCH})
    try:
        yield driver
    finally:
        driver.quit()


def problems(driver: WebDriver) -> list[str]:
    """The page's Content-Security-Policy refusals and script errors so far."""
    found: list[str] = driver.execute_script("return window.recallProblems;")
    return found


async def in_browser(step: Callable[..., T], *args: Any) -> T:
    return await asyncio.to_thread(step, *args)


def unique(word: str) -> str:
    """A title word no other bead of the session's hub has."""
    return f"{word}{secrets.token_hex(4)}"


def text_of(driver: WebDriver, css: str) -> str:
    try:
        return driver.find_element(By.CSS_SELECTOR, css).text
    except (NoSuchElementException, StaleElementReferenceException):
        return ""


def sign_in(driver: WebDriver, base: str, ai_id: str) -> None:
    """Sign in on the login page (dev mode: type the AI id) as a new browser session."""
    driver.get(f"{base}/login")
    driver.delete_all_cookies()
    driver.get(f"{base}/login")
    field = driver.find_element(By.CSS_SELECTOR, "input[name=ai_id]")
    field.clear()
    field.send_keys(ai_id)
    driver.find_element(By.CSS_SELECTOR, "form[action='/login'] button[type=submit]").click()
    wait_for(driver, lambda d: d.current_url.endswith("/groups") and ai_id in text_of(d, "header .who"),
             what=f"signed in as {ai_id}")


def search_for(driver: WebDriver, base: str, query: str) -> None:
    driver.get(f"{base}/search?{urlencode({'q': query})}")
    wait_for(driver, lambda d: text_of(d, "#h-hits").startswith("Hits"), what="the search's hits")


def hit_titles(driver: WebDriver) -> list[str]:
    return [a.text for a in driver.find_elements(By.CSS_SELECTOR, "section[aria-labelledby=h-hits] li h3 a")]


def search_until_hit(driver: WebDriver, base: str, query: str, title: str) -> None:
    """Search until ``title`` is a hit: a new bead reaches the hub's indexes within moments, not at once."""

    def found(d: WebDriver) -> bool:
        search_for(d, base, query)
        return title in hit_titles(d)

    wait_for(driver, found, timeout=30, what=f"a hit titled {title!r} for {query!r}")


def open_bead(driver: WebDriver, base: str, bead_id: str) -> tuple[str, str]:
    """The bead page's heading and main text."""
    driver.get(f"{base}/beads/{bead_id}")
    heading = wait_for(driver, lambda d: d.find_element(By.CSS_SELECTOR, "main h1"), what="the bead page")
    return heading.text, driver.find_element(By.ID, "main").text


UNLABELLED_FIELDS = """
return Array.from(document.querySelectorAll("input, select, textarea"))
  .filter(function (el) { return el.type !== "hidden"; })
  .filter(function (el) {
    var byFor = el.id && document.querySelector('label[for="' + CSS.escape(el.id) + '"]');
    var wrapped = el.closest("label");
    var named = (el.getAttribute("aria-label") || "").trim() || el.getAttribute("aria-labelledby");
    return !((byFor && byFor.textContent.trim()) || (wrapped && wrapped.textContent.trim()) || named);
  })
  .map(function (el) { return el.outerHTML; });
"""


# --- what each identity sees ------------------------------------------------------------------------


async def test_each_identity_sees_only_what_the_hub_lets_it_see(console, browser, connect: ClientFactory):
    alice, bob, carol = await connect(new_ai("o")), await connect(), await connect()
    group = await alice.create_group("console-visibility")
    await alice.add_member(group.group_id, bob.ai_id)
    word = unique("quokka")
    private = await alice.create_bead(f"Private {word} plan", "Only Alice may read this.", visibility="private")
    shared = await alice.create_bead(f"Group {word} decision", "Members read this.", visibility="group",
                                     group_id=group.group_id, bead_type="decision")
    base = console.url

    def as_alice() -> None:
        sign_in(browser, base, alice.ai_id)
        search_until_hit(browser, base, word, private.title)
        assert shared.title in hit_titles(browser)
        heading, text = open_bead(browser, base, private.bead_id)
        assert heading == private.title and "Only Alice may read this." in text

    def as_bob() -> None:
        sign_in(browser, base, bob.ai_id)
        search_until_hit(browser, base, word, shared.title)  # the index has both beads by now
        assert private.title not in hit_titles(browser)
        assert private.title not in browser.find_element(By.ID, "main").text  # nor in why/context
        heading, text = open_bead(browser, base, private.bead_id)
        assert heading == "Bead not found" and "not visible to you" in text and private.title not in text
        heading, _ = open_bead(browser, base, shared.bead_id)
        assert heading == shared.title

    def as_carol() -> None:
        sign_in(browser, base, carol.ai_id)
        search_for(browser, base, word)
        # Other tests' global beads may come up as weak vector matches; none of these may.
        assert not {private.title, shared.title} & set(hit_titles(browser))
        assert word not in browser.find_element(By.ID, "main").text.replace(f"Search: {word}", "")
        for bead in (private, shared):
            heading, text = open_bead(browser, base, bead.bead_id)
            assert heading == "Bead not found" and bead.title not in text
        browser.get(f"{base}/groups/{group.group_id}/graph")
        assert text_of(browser, "main h1") == "Not found"
        browser.get(f"{base}/groups")
        assert group.group_id not in text_of(browser, "main")

    await in_browser(as_alice)
    await in_browser(as_bob)
    await in_browser(as_carol)


# --- the graph ---------------------------------------------------------------------------------------

GRAPH_STATE = """
var el = document.getElementById("graph");
var cy = window.recallGraph;
if (!cy) { return null; }
return {nodes: cy.nodes().map(function (n) { return n.id(); }),
        edges: cy.edges().map(function (e) { return [e.data("source"), e.data("target"), e.data("type")]; }),
        canvases: el.querySelectorAll("canvas").length,
        listed: document.querySelectorAll("#node-list li").length};
"""

LONELIEST_NODE = """
var el = document.getElementById("graph");
var cy = window.recallGraph;
var best = null, bestGap = -1;
cy.nodes().forEach(function (n) {
  var p = n.renderedPosition(), gap = Infinity;
  cy.nodes().forEach(function (m) {
    if (m === n) { return; }
    var q = m.renderedPosition();
    gap = Math.min(gap, Math.hypot(p.x - q.x, p.y - q.y));
  });
  var inside = p.x > 10 && p.y > 10 && p.x < el.clientWidth - 10 && p.y < el.clientHeight - 10;
  if (inside && gap > bestGap) { best = n; bestGap = gap; }
});
var p = best.renderedPosition();
return {id: best.id(), label: best.data("label"), x: p.x, y: p.y, width: el.clientWidth, height: el.clientHeight};
"""


async def test_the_group_graph_shows_every_bead_and_a_click_shows_its_detail(console, browser,
                                                                            connect: ClientFactory):
    ops, member = await connect(new_ai("o")), await connect()
    group = await ops.create_group("console-graph")
    await ops.add_member(group.group_id, member.ai_id)
    word = unique("graph")
    beads = [
        await (ops if i % 2 else member).create_bead(
            f"{word} step {i}", f"Step {i} of the plan.", visibility="group", group_id=group.group_id,
            bead_type="decision" if i % 3 == 0 else "fact", importance=3 + i % 7)
        for i in range(14)
    ]
    linked = {(later.bead_id, earlier.bead_id, "FOLLOWS_FROM") for earlier, later in itertools.pairwise(beads)}
    linked.add((beads[0].bead_id, beads[7].bead_id, "RELATED_TO"))
    for source, target, rel_type in sorted(linked):
        await ops.add_relationship(source, target, rel_type)
    in_group = {b.bead_id for b in await member.get_by_group(group.group_id)}  # what the hub says the group holds
    assert in_group == {b.bead_id for b in beads}

    def look() -> dict[str, Any]:
        sign_in(browser, console.url, member.ai_id)
        browser.get(f"{console.url}/groups/{group.group_id}/graph")
        state: dict[str, Any] = wait_for(browser, lambda d: d.execute_script(GRAPH_STATE), what="the cytoscape graph")
        assert len(state["nodes"]) == len(in_group) == state["listed"] and set(state["nodes"]) == in_group
        assert state["canvases"] >= 1
        wait_for(browser, lambda d: text_of(d, "#graph-status").startswith(f"{len(in_group)} beads"),
                 what="the graph's status line")
        container = browser.find_element(By.ID, "graph")
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", container)  # all of it in view
        target = browser.execute_script(LONELIEST_NODE)
        ActionChains(browser).move_to_element_with_offset(
            container, round(target["x"] - target["width"] / 2), round(target["y"] - target["height"] / 2)
        ).click().perform()
        wait_for(browser, lambda d: text_of(d, "#panel-title") == target["label"], what="the clicked bead's panel")
        panel = text_of(browser, "#bead-panel")
        assert "Importance" in panel and "Open the bead" in panel
        link = browser.find_element(By.CSS_SELECTOR, "#panel-body a")
        assert link.get_attribute("href").endswith(f"/beads/{target['id']}")
        return state

    state = await in_browser(look)
    # Every relationship made above is drawn, and every edge drawn is one the hub reports (besides those,
    # the hub links similar beads of a scope by itself, after the write).
    shown = {tuple(edge) for edge in state["edges"]}
    reported = {(r.from_id, r.to_id, r.rel_type.value)
                for b in beads for r in await member.get_relationships(b.bead_id)}
    assert linked <= shown <= reported


# --- search ------------------------------------------------------------------------------------------


async def test_search_shows_hits_with_their_explanation(console, browser, connect: ClientFactory):
    author = await connect()
    word = unique("lighthouse")
    bead = await author.create_bead(f"The {word} keeper logs every storm", "Storm logs go to the harbour office.",
                                    visibility="private", tags=["storms"])
    await author.create_bead("Harbour office opening hours", "Nine to five.", visibility="private")

    def look() -> None:
        sign_in(browser, console.url, author.ai_id)
        search_until_hit(browser, console.url, f"{word} storm", bead.title)
        hit = browser.find_element(
            By.XPATH, f"//section[@aria-labelledby='h-hits']//li[.//h3/a[normalize-space()='{bead.title}']]")
        facts = dict(zip([dt.text for dt in hit.find_elements(By.CSS_SELECTOR, "dl.facts dt")],
                         [dd.text for dd in hit.find_elements(By.CSS_SELECTOR, "dl.facts dd")], strict=True))
        assert {"Score", "Sources", "Relevance", "Prior"} <= facts.keys()
        assert float(facts["Score"]) > 0 and float(facts["Relevance"]) > 0
        assert "keyword #" in facts["Sources"], facts  # the title word matched in the keyword list
        assert hit.find_element(By.CSS_SELECTOR, "h3 a").get_attribute("href").endswith(f"/beads/{bead.bead_id}")
        assert bead.title in text_of(browser, "section[aria-labelledby=h-context]")

    await in_browser(look)


# --- the live feed -----------------------------------------------------------------------------------


async def test_a_new_bead_appears_in_the_live_feed_without_reload(console, browser, connect: ClientFactory):
    ops, member = await connect(new_ai("o")), await connect()
    group = await ops.create_group("console-feed")
    await ops.add_member(group.group_id, member.ai_id)
    await ops.create_bead("Feed opens with this", visibility="group", group_id=group.group_id)

    def open_feed() -> None:
        sign_in(browser, console.url, member.ai_id)
        browser.get(f"{console.url}/feed/{group.group_id}")
        wait_for(browser, lambda d: text_of(d, "#feed-status").startswith("Live"), what="the feed listening")
        assert "Feed opens with this" in text_of(browser, "#feed")  # the backlog
        browser.execute_script("document.body.dataset.sameLoad = 'yes';")  # gone if the page reloaded

    await in_browser(open_feed)
    word = unique("beacon")
    bead = await ops.create_bead(f"Live {word} lit", visibility="group", group_id=group.group_id)
    await ops.create_bead(f"Private {word} note", visibility="private")  # never reaches the member's feed

    def see_it() -> None:
        feed = browser.find_element(By.ID, "feed")
        assert feed.get_attribute("aria-live") == "polite"
        wait_for(browser, lambda d: bead.title in text_of(d, "#feed"), what="the new bead in the live feed")
        assert browser.execute_script("return document.body.dataset.sameLoad") == "yes"
        item = feed.find_elements(By.TAG_NAME, "li")[-1]
        assert bead.title in item.text and ops.ai_id in item.text
        assert item.find_element(By.TAG_NAME, "a").get_attribute("href").endswith(f"/beads/{bead.bead_id}")
        assert f"Private {word}" not in text_of(browser, "#feed")
        browser.get("about:blank")  # closes the event stream

    await in_browser(see_it)


# --- keyboard and labels -----------------------------------------------------------------------------


def tab_to(driver: WebDriver, css: str, most: int = 40) -> None:
    """Press Tab until the element matching ``css`` has the focus."""
    target = driver.find_element(By.CSS_SELECTOR, css)
    for _ in range(most):
        if driver.switch_to.active_element == target:
            return
        ActionChains(driver).send_keys(Keys.TAB).perform()
    raise AssertionError(f"{css} not reached with {most} Tab presses")


async def test_login_and_search_work_with_the_keyboard_alone(console, browser, connect: ClientFactory):
    author = await connect()
    word = unique("compass")
    bead = await author.create_bead(f"The {word} points north", visibility="private")

    def by_keyboard() -> None:
        browser.get(f"{console.url}/login")
        browser.delete_all_cookies()
        browser.get(f"{console.url}/login")
        tab_to(browser, "input[name=ai_id]")
        ActionChains(browser).send_keys(author.ai_id, Keys.ENTER).perform()
        wait_for(browser, lambda d: d.current_url.endswith("/groups"), what="signed in by keyboard")
        assert author.ai_id in text_of(browser, "header .who")
        browser.get(f"{console.url}/search")

        def searched(d: WebDriver) -> bool:
            tab_to(d, "input[name=q]")
            ActionChains(d).send_keys(word, Keys.ENTER).perform()
            wait_for(d, lambda d: text_of(d, "#h-hits").startswith("Hits"), what="hits after Enter")
            if bead.title in hit_titles(d):
                return True
            d.get(f"{console.url}/search")  # not indexed yet: a fresh form, by keyboard again
            return False

        wait_for(browser, searched, timeout=30, what="the search typed with the keyboard")
        tab_to(browser, "section[aria-labelledby=h-hits] li h3 a")  # the hit is reachable too
        ActionChains(browser).send_keys(Keys.ENTER).perform()
        wait_for(browser, lambda d: text_of(d, "main h1") == bead.title, what="the bead opened by keyboard")

    await in_browser(by_keyboard)


async def test_every_form_field_of_every_page_has_a_label(console, browser, connect: ClientFactory):
    ops, member = await connect(new_ai("o")), await connect()
    group = await ops.create_group("console-labels")
    await ops.add_member(group.group_id, member.ai_id)
    bead = await member.create_bead("Labelled fields matter", visibility="group", group_id=group.group_id)
    pages = ["/groups", f"/groups/{group.group_id}/graph", "/search", "/search?q=labelled", f"/beads/{bead.bead_id}",
             f"/handoffs?group={group.group_id}", f"/feed/{group.group_id}"]

    def check() -> dict[str, list[str]]:
        unlabelled: dict[str, list[str]] = {}
        browser.delete_all_cookies()
        browser.get(f"{console.url}/login")
        unlabelled["/login"] = browser.execute_script(UNLABELLED_FIELDS)
        sign_in(browser, console.url, ops.ai_id)  # the ops sees the most forms (members, handoff, audit)
        for path in pages:
            browser.get(console.url + path)
            wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, "main h1"), what=path)
            assert browser.find_elements(By.CSS_SELECTOR, "input, select, textarea") or path.startswith("/feed")
            unlabelled[path] = browser.execute_script(UNLABELLED_FIELDS)
        browser.get("about:blank")
        return unlabelled

    assert await in_browser(check) == {path: [] for path in ["/login", *pages]}


async def test_a_group_of_two_thousand_beads_renders_and_stays_usable(console, browser, connect: ClientFactory):
    """A few thousand beads: the page draws every one (with every edge) and still answers a click."""
    ops = await connect(new_ai("o"))
    group = (await ops.create_group("console-big")).group_id
    word = unique("big")
    items = await ops.create_beads(
        [{"title": f"{word} fact {i}", "content": f"fact {i}", "visibility": "group", "group_id": group,
          "session_id": f"s_{word[-8:]}{i // 250}", "importance": i % 11} for i in range(2000)],
        batch_size=128, concurrency=2,
    )
    assert all(item.error is None for item in items)

    def render() -> tuple[float, dict[str, Any]]:
        sign_in(browser, console.url, ops.ai_id)
        browser.get(f"{console.url}/groups/{group}/graph")
        state: dict[str, Any] = wait_for(
            browser, lambda d: (s := d.execute_script(GRAPH_STATE)) and len(s["nodes"]) == 2000 and s,
            what="2,000 beads drawn", timeout=120,
        )
        drawn_ms: float = browser.execute_script("return performance.now();")  # since this page began loading
        browser.execute_script("window.recallGraph.nodes()[0].emit('tap');")
        wait_for(browser, lambda d: text_of(d, "#panel-title").startswith(word), what="a bead's panel")
        return drawn_ms, state

    drawn_ms, state = await in_browser(render)
    assert len(state["edges"]) >= 1900  # each session's FOLLOWS_FROM chain at least
    print(f"\n2,000 beads and {len(state['edges'])} edges drawn {drawn_ms / 1000:.1f} s after the page began loading")


# --- the graph's filters -----------------------------------------------------------------------------


async def test_the_graph_filter_form_submits_and_filters_the_graph(console, browser, connect: ClientFactory):
    ops = await connect(new_ai("o"))
    group = (await ops.create_group("console-filters")).group_id
    word = unique("filter")
    beads = [await ops.create_bead(f"{word} {kind} {i}", visibility="group", group_id=group, bead_type=kind)
             for i, kind in enumerate(["decision", "fact", "fact", "decision", "note"])]
    decisions = {b.bead_id for b in beads if b.bead_type.value == "decision"}

    def drawn(d: WebDriver) -> set[str] | None:
        state = d.execute_script(GRAPH_STATE)
        return set(state["nodes"]) if state else None

    def filter_by_type() -> None:
        sign_in(browser, console.url, ops.ai_id)
        browser.get(f"{console.url}/groups/{group}/graph")
        wait_for(browser, lambda d: drawn(d) == {b.bead_id for b in beads}, what="every bead drawn")
        form = browser.find_element(By.CSS_SELECTOR, "form[aria-label='Filter the graph']")
        assert browser.execute_script("return arguments[0].checkValidity();", form)  # as served
        Select(form.find_element(By.NAME, "type")).select_by_value("decision")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for(browser, lambda d: "type=decision" in d.current_url, what="the filtered page")
        wait_for(browser, lambda d: drawn(d) == decisions, what="only the decisions drawn")
        assert text_of(browser, "#graph-status").startswith(f"{len(decisions)} beads")
        chosen = Select(browser.find_element(By.CSS_SELECTOR, "form[aria-label='Filter the graph'] select[name=type]"))
        assert chosen.first_selected_option.get_attribute("value") == "decision"  # the form shows the filter
        assert browser.find_elements(By.CSS_SELECTOR, "main [role=alert]") == []
        assert problems(browser) == []

    await in_browser(filter_by_type)


# --- the Content-Security-Policy ---------------------------------------------------------------------

INVALID_FIELDS = """
return Array.from(document.querySelectorAll("input, select, textarea"))
  .filter(function (el) {
    var v = el.validity;
    return v.rangeOverflow || v.rangeUnderflow || v.stepMismatch || v.typeMismatch || v.patternMismatch ||
           v.tooLong || v.badInput;
  })
  .map(function (el) { return el.outerHTML; });
"""
"""Fields whose value, as served, the browser would refuse to submit (empty required fields aside)."""


async def test_no_page_trips_the_content_security_policy_or_serves_an_invalid_form(
        console, browser, connect: ClientFactory):
    ops, heir = await connect(new_ai("o")), await connect(new_ai("o"))
    group = (await ops.create_group("console-policy")).group_id
    await ops.add_member(group, heir.ai_id)
    word = unique("policy")
    bead = await heir.create_bead(f"The {word} holds", "Strict pages.", visibility="group", group_id=group,
                                  bead_type="decision")
    await ops.add_relationship(bead.bead_id, (await ops.create_bead(f"{word} root", visibility="group",
                                                                     group_id=group)).bead_id, "RELATED_TO")
    await ops.transfer_ops(group, heir.ai_id, "Over to you")
    pages = {
        "/groups": "main h1",
        f"/groups/{group}/graph": "#graph canvas",
        f"/search?q={word}": "#h-hits",
        f"/beads/{bead.bead_id}": "main h1",
        f"/handoffs?group={group}": "main h1",
        f"/groups/{group}/audit": "main h1",
        "/beads/b_doesnotexist00": "main h1",
        "/no/such/page": "main h1",
    }

    def visit() -> dict[str, list[str]]:
        seen: dict[str, list[str]] = {}
        browser.delete_all_cookies()
        browser.get(f"{console.url}/login")
        seen["/login"] = problems(browser) + browser.execute_script(INVALID_FIELDS)
        sign_in(browser, console.url, heir.ai_id)  # the new ops: member forms, the acknowledge form, the audit
        for path, ready in pages.items():
            browser.get(console.url + path)
            wait_for(browser, lambda d, css=ready: d.find_elements(By.CSS_SELECTOR, css), what=path)
            seen[path] = problems(browser) + browser.execute_script(INVALID_FIELDS)
        browser.get(f"{console.url}/feed/{group}")
        wait_for(browser, lambda d: text_of(d, "#feed-status").startswith("Live"), what="the feed listening")
        seen["/feed"] = problems(browser)
        # The watch itself works: the policy refuses an inline script and an inline style here.
        browser.execute_script(
            "var s = document.createElement('script'); s.textContent = 'window.inlineRan = true;';"
            "document.body.appendChild(s);"
            "var d = document.createElement('div'); d.setAttribute('style', 'color: red');"
            "document.body.appendChild(d);"
        )
        wait_for(browser, lambda d: len(problems(d)) >= 2, what="the policy's refusals reported")
        seen["inline"] = problems(browser)
        assert browser.execute_script("return window.inlineRan === undefined;")
        browser.get("about:blank")
        return seen

    seen = await in_browser(visit)
    inline = seen.pop("inline")
    assert {p.split()[1] for p in inline} == {"script-src-elem", "style-src-attr"}, inline
    assert seen == {path: [] for path in ["/login", *pages, "/feed"]}
