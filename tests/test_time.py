"""Time: validity intervals on beads, reads as of a past moment, and date expressions in queries.

The as-of tests follow one scripted timeline — create, update twice, a second bead, a link, a member
removed — and take every moment from the hub's own replies. Between two steps the test waits (bounded,
``until``) for the clock to pass the last reply's millisecond, so every step has a moment of its own.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from conftest import ClientFactory, new_ai, until
from recall_client import RecallClient
from recall_hub.context import HubContext
from recall_hub.retrieval.dates import find_window
from recall_hub.retrieval.ranking import Fused
from recall_hub.retrieval.search import _add_dated
from recall_hub.retrieval.timely import DATE_BOOST, boost_window
from recall_hub.timeutil import to_ms
from recall_schemas import (
    BeadFilters,
    CreateBead,
    DateWindow,
    GetBead,
    InvalidRequest,
    MemoryBead,
    NotFound,
    RelType,
    SearchBeads,
    SearchMode,
    SearchResult,
    Visibility,
    new_id,
)


def _word() -> str:
    return "zq" + secrets.token_hex(5)


async def _past(moment: datetime) -> None:
    """Wait until the clock has left ``moment``'s millisecond, so the next step has a later time stamp."""
    await until("the clock passes the last step", lambda: time.time_ns() // 1_000_000 > to_ms(moment), 5)


@dataclass
class Timeline:
    alice: RecallClient
    bob: RecallClient
    carol: RecallClient
    group_id: str
    session_id: str
    word: str
    tag_a: str
    tag_b: str
    bead: MemoryBead
    other: MemoryBead | None = None
    at: dict[str, datetime] = field(default_factory=dict)


async def _timeline(connect: ClientFactory) -> Timeline:
    alice, bob, carol = await connect(new_ai()), await connect(new_ai()), await connect(new_ai())
    group = await alice.create_group("timeline")
    await alice.add_member(group.group_id, bob.ai_id)
    word, tag_a, tag_b = _word(), f"ta-{_word()}", f"tb-{_word()}"
    session = new_id("s")
    bead = await alice.create_bead(
        f"Retry policy {word}", "three retries", tags=[tag_a], group_id=group.group_id,
        visibility="group", session_id=session,
    )
    t = Timeline(alice, bob, carol, group.group_id, session, word, tag_a, tag_b, bead)
    t.at["before"] = bead.created_at - timedelta(milliseconds=1)
    t.at["created"] = bead.created_at
    await _past(bead.created_at)
    v2 = await alice.update_bead(bead.bead_id, title=f"Retry policy {word} revised", tags=[tag_a, tag_b])
    t.at["v2"] = v2.updated_at
    await _past(v2.updated_at)
    v3 = await alice.update_bead(
        bead.bead_id, content="five retries", tags=[tag_b], valid_from=datetime(2024, 1, 1, tzinfo=UTC)
    )
    t.at["v3"] = v3.updated_at
    await _past(v3.updated_at)
    t.other = await alice.create_bead(
        f"Backoff doubles {word}", "2^n seconds", tags=[tag_b], group_id=group.group_id, visibility="group",
        session_id=session,
    )
    t.at["other"] = t.other.created_at
    await _past(t.other.created_at)
    edge = await alice.add_relationship(t.other.bead_id, bead.bead_id, RelType.PART_OF)
    t.at["linked"] = edge.created_at
    await _past(edge.created_at)
    await alice.remove_member(group.group_id, bob.ai_id)
    return t


EXPECTED = {  # as of each moment: (title suffix, content, tags by name, version)
    "created": ("", "three retries", ["a"], 1),
    "v2": (" revised", "three retries", ["a", "b"], 2),
    "v3": (" revised", "five retries", ["b"], 3),
    "other": (" revised", "five retries", ["b"], 3),
    "linked": (" revised", "five retries", ["b"], 3),
}


def _expected(t: Timeline, moment: str) -> tuple[str, str, list[str], int]:
    suffix, content, tags, version = EXPECTED[moment]
    names = {"a": t.tag_a, "b": t.tag_b}
    return f"Retry policy {t.word}{suffix}", content, [names[n] for n in tags], version


def _shape(bead: MemoryBead) -> tuple[str, str, list[str], int]:
    return bead.title, bead.content, bead.tags, bead.version


async def test_every_read_as_of_each_moment_shows_exactly_the_version_of_then(connect: ClientFactory) -> None:
    t = await _timeline(connect)
    me, bead_id = t.alice, t.bead.bead_id
    assert t.other is not None
    # Now: the latest version, and the timestamps the hub gave are strictly ordered.
    moments = [t.at[name] for name in ("before", "created", "v2", "v3", "other", "linked")]
    assert moments == sorted(moments) and len(set(moments)) == len(moments)
    assert _shape(await me.get_bead(bead_id)) == _expected(t, "linked")

    with pytest.raises(NotFound):
        await me.get_bead(bead_id, as_of=t.at["before"])
    assert await me.get_by_group(t.group_id, as_of=t.at["before"]) == []
    assert await me.get_by_session(t.session_id, as_of=t.at["before"]) == []
    before = await me.search_beads(t.word, mode="keyword", as_of=t.at["before"])
    assert before.hits == []
    with pytest.raises(NotFound):
        await me.traverse_graph(bead_id, as_of=t.at["before"])

    for moment in EXPECTED:
        at = t.at[moment]
        want = _expected(t, moment)
        assert _shape(await me.get_bead(bead_id, as_of=at)) == want, moment
        # Listings: what matched then (the tag the bead had then), in the version of then.
        in_group = await me.get_by_group(t.group_id, as_of=at)
        other_exists = moment in ("other", "linked")
        assert [b.bead_id for b in in_group] == ([t.other.bead_id] if other_exists else []) + [bead_id], moment
        assert _shape(in_group[-1]) == want, moment
        session = await me.get_by_session(t.session_id, as_of=at)
        assert session[0].bead_id == bead_id and _shape(session[0]) == want, moment
        for tag in (t.tag_a, t.tag_b):
            tagged = [b for b in await me.get_by_tag(tag, as_of=at) if b.bead_id == bead_id]
            assert [_shape(b) for b in tagged] == ([want] if tag in want[2] else []), (moment, tag)
        recent = {b.bead_id: b for b in await me.get_recent(limit=500, as_of=at)}
        assert _shape(recent[bead_id]) == want and (t.other.bead_id in recent) == other_exists, moment
        # Search: candidates by today's words, answered with the version of then.
        found = {h.bead.bead_id: h.bead for h in (await me.search_beads(t.word, mode="keyword", as_of=at)).hits}
        assert _shape(found[bead_id]) == want and (t.other.bead_id in found) == other_exists, moment
        hybrid = {h.bead.bead_id: h.bead for h in (await me.search_beads(f"retry {t.word}", as_of=at)).hits}
        assert _shape(hybrid[bead_id]) == want, moment
        # Traversal: the link made at "linked" is not walked before it.
        walk = await me.traverse_graph(bead_id, rel_types=[RelType.PART_OF], as_of=at)
        nodes = {n.bead.bead_id: n.bead for n in walk.nodes}
        assert set(nodes) == ({bead_id, t.other.bead_id} if moment == "linked" else {bead_id}), moment
        assert _shape(nodes[bead_id]) == want and len(walk.edges) == (1 if moment == "linked" else 0), moment


async def test_as_of_decides_visibility_now_for_every_kind_of_outsider(connect: ClientFactory) -> None:
    t = await _timeline(connect)
    bead_id = t.bead.bead_id
    dave = await connect(new_ai())
    secret = await dave.create_bead(f"Dave's own note {t.word}", "private")
    outsiders = [(t.bob, bead_id, "removed member"), (t.carol, bead_id, "non-member"),
                 (t.alice, secret.bead_id, "another identity's private bead")]
    for who, hidden, kind in outsiders:
        for moment in ("created", "v2", "linked"):
            at = t.at[moment] if hidden == bead_id else secret.created_at
            with pytest.raises(NotFound):
                await who.get_bead(hidden, as_of=at)
            hits = (await who.search_beads(t.word, mode="keyword", as_of=at)).hits
            assert hidden not in [h.bead.bead_id for h in hits], (kind, moment)
            assert hidden not in [b.bead_id for b in await who.get_recent(limit=500, as_of=at)], kind
            assert hidden not in [b.bead_id for b in await who.get_by_tag(t.tag_b, as_of=at)], kind
            with pytest.raises(NotFound):
                await who.traverse_graph(hidden, as_of=at)
        if hidden == bead_id:  # the group is gone for them, whatever the moment
            with pytest.raises(NotFound):
                await who.get_by_group(t.group_id, as_of=t.at["created"])
    # A walk never passes, as of then, through a bead the walker cannot see now.
    assert t.other is not None
    erin = await connect(new_ai())
    await t.alice.add_member(t.group_id, erin.ai_id)
    walk = await erin.traverse_graph(t.other.bead_id, as_of=t.at["linked"], rel_types=[RelType.PART_OF])
    assert {n.bead.bead_id for n in walk.nodes} == {t.other.bead_id, bead_id}


async def test_a_bead_shared_later_stays_hidden_as_of_when_it_was_private(connect: ClientFactory) -> None:
    alice, erin = await connect(new_ai()), await connect(new_ai())
    group = await alice.create_group("shared later")
    await alice.add_member(group.group_id, erin.ai_id)
    word = _word()
    private = await alice.create_bead(f"Draft {word}", "not yet shared")
    await _past(private.created_at)
    shared = await alice.update_bead(private.bead_id, visibility="group", group_id=group.group_id)
    assert (await erin.get_bead(private.bead_id)).visibility is Visibility.GROUP
    with pytest.raises(NotFound):
        await erin.get_bead(private.bead_id, as_of=private.created_at)
    assert (await erin.search_beads(word, mode="keyword", as_of=private.created_at)).hits == []
    assert await erin.get_by_group(group.group_id, as_of=private.created_at) == []
    assert [b.bead_id for b in await erin.get_by_group(group.group_id, as_of=shared.updated_at)] == [private.bead_id]
    assert (await alice.get_bead(private.bead_id, as_of=private.created_at)).visibility is Visibility.PRIVATE


async def test_a_deleted_bead_is_gone_as_of_any_time_with_its_versions(connect: ClientFactory, hub: HubContext) -> None:
    me = await connect(new_ai())
    bead = await me.create_bead(f"Short-lived {_word()}", "v1")
    await _past(bead.created_at)
    await me.update_bead(bead.bead_id, content="v2")
    assert (await me.get_bead(bead.bead_id, as_of=bead.created_at)).content == "v1"
    await me.delete_bead(bead.bead_id)
    with pytest.raises(NotFound):
        await me.get_bead(bead.bead_id, as_of=bead.created_at)
    rows = await hub.graph.ro_query("MATCH (v:BeadVersion {bead_id: $id}) RETURN count(v)", {"id": bead.bead_id})
    assert rows[0][0] == 0


# --- validity intervals --------------------------------------------------------------------------------


async def test_valid_at_keeps_the_facts_whose_interval_holds_it_in_every_list(connect: ClientFactory) -> None:
    me = await connect(new_ai())
    word = _word()
    y2020 = await me.create_bead(f"Office in Berlin {word}", valid_from=datetime(2020, 1, 1, tzinfo=UTC),
                                 valid_to=datetime(2020, 12, 31, tzinfo=UTC))
    since_2021 = await me.create_bead(f"Office in Lisbon {word}", valid_from=datetime(2021, 1, 1, tzinfo=UTC))
    timeless = await me.create_bead(f"Office has a cat {word}")
    assert (y2020.valid_from, y2020.valid_to) == (datetime(2020, 1, 1, tzinfo=UTC), datetime(2020, 12, 31, tzinfo=UTC))
    assert (timeless.valid_from, timeless.valid_to) == (None, None)
    cases = {
        datetime(2020, 6, 1, tzinfo=UTC): {y2020.bead_id, timeless.bead_id},
        datetime(2020, 12, 31, tzinfo=UTC): {y2020.bead_id, timeless.bead_id},  # the interval is closed
        datetime(2022, 3, 1, tzinfo=UTC): {since_2021.bead_id, timeless.bead_id},
        datetime(2019, 1, 1, tzinfo=UTC): {timeless.bead_id},
    }
    for at, expected in cases.items():
        for mode in SearchMode:  # keyword index, vector sets and the graph each apply it before top-k
            query = f"office {word}" if mode is not SearchMode.KEYWORD else word
            result = await me.search_beads(query, limit=50, filters={"valid_at": at}, mode=mode)
            found = {h.bead.bead_id for h in result.hits} & {y2020.bead_id, since_2021.bead_id, timeless.bead_id}
            assert found == expected, (at, mode)


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
async def test_intervals_are_checked_on_create_and_update_and_bad_time_changes_nothing(
    connect: ClientFactory,
) -> None:
    me = await connect(new_ai())
    jan, feb = datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 2, 1, tzinfo=UTC)
    with pytest.raises(InvalidRequest):
        await me.create_bead("Backwards", valid_from=feb, valid_to=jan)
    with pytest.raises(InvalidRequest):
        await me.create_bead("Naive", valid_from=datetime(2024, 1, 1))
    # The hub refuses the same when a request skips the client's checks.
    for raw in (
        CreateBead.model_construct(title="Naive", valid_from=datetime(2024, 1, 1)),
        CreateBead.model_construct(title="Backwards", valid_from=feb, valid_to=jan),
    ):
        with pytest.raises(InvalidRequest):
            await me.call("create_bead", raw, MemoryBead)
    bead = await me.create_bead(f"Lease {_word()}", valid_from=feb)
    # Only valid_to is sent, so only the hub (against the stored valid_from) can see it is backwards.
    with pytest.raises(InvalidRequest):
        await me.update_bead(bead.bead_id, valid_to=jan)
    unchanged = await me.get_bead(bead.bead_id)
    assert (unchanged.version, unchanged.valid_to) == (1, None)
    with pytest.raises(InvalidRequest):
        await me.get_bead(bead.bead_id, as_of=datetime(2024, 1, 1))
    with pytest.raises(InvalidRequest):
        await me.call("get_bead", GetBead.model_construct(bead_id=bead.bead_id, as_of=datetime(2024, 1, 1)), MemoryBead)
    with pytest.raises(InvalidRequest):
        await me.call("search_beads", SearchBeads.model_construct(query="x", as_of="yesterday"), SearchResult)
    moved = await me.update_bead(bead.bead_id, valid_from=jan, valid_to=feb)
    assert (moved.valid_from, moved.valid_to, moved.version) == (jan, feb, 2)
    cleared = await me.update_bead(bead.bead_id, valid_to=None)
    assert (cleared.valid_from, cleared.valid_to) == (jan, None)
    assert (await me.get_bead(bead.bead_id, as_of=moved.updated_at)).valid_to == feb
    # Any time zone is accepted and answered in UTC.
    two_hours_east = timezone(timedelta(hours=2))
    east = await me.create_bead(f"East {_word()}", valid_from=datetime(2024, 1, 1, 4, tzinfo=two_hours_east))
    assert east.valid_from == datetime(2024, 1, 1, 2, tzinfo=UTC)


# --- date expressions ------------------------------------------------------------------------------------

NOW = datetime(2025, 6, 18, 15, 30, tzinfo=UTC)  # a Wednesday


def _day(year: int, month: int, day: int) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "text", "start", "end"),
    [
        ("what did we decide last May", "last May", _day(2025, 5, 1), _day(2025, 6, 1)),
        ("what changed in June", "in June", _day(2025, 6, 1), _day(2025, 7, 1)),
        ("the outage in December", "in December", _day(2024, 12, 1), _day(2025, 1, 1)),
        ("releases in 2023", "in 2023", _day(2023, 1, 1), _day(2024, 1, 1)),
        ("what broke yesterday", "yesterday", _day(2025, 6, 17), _day(2025, 6, 18)),
        ("notes from today", "today", _day(2025, 6, 18), _day(2025, 6, 19)),
        ("the day before yesterday", "the day before yesterday", _day(2025, 6, 16), _day(2025, 6, 17)),
        # "N units ago" is said loosely: the window spreads either side of then (dates.AGO_DAYS)
        ("deploy 3 days ago", "3 days ago", _day(2025, 6, 14), _day(2025, 6, 17)),
        ("plans two weeks ago", "two weeks ago", _day(2025, 5, 28), _day(2025, 6, 12)),
        ("last week's review", "last week", _day(2025, 6, 9), _day(2025, 6, 16)),
        ("budget this month", "this month", _day(2025, 6, 1), _day(2025, 7, 1)),
        ("goals last year", "last year", _day(2024, 1, 1), _day(2025, 1, 1)),
        ("a month ago", "a month ago", _day(2025, 5, 4), _day(2025, 6, 4)),
        ("standup last Monday", "last Monday", _day(2025, 6, 16), _day(2025, 6, 17)),
        ("the incident on 2024-02-29", "2024-02-29", _day(2024, 2, 29), _day(2024, 3, 1)),
        ("launch May 7, 2023", "May 7, 2023", _day(2023, 5, 7), _day(2023, 5, 8)),
        ("launch 7 March 2023", "7 March 2023", _day(2023, 3, 7), _day(2023, 3, 8)),
        ("hiring in Sept 2022", "Sept 2022", _day(2022, 9, 1), _day(2022, 10, 1)),
        ("figures for 2022-11", "2022-11", _day(2022, 11, 1), _day(2022, 12, 1)),
        ("errors in the last 3 days", "in the last 3 days", NOW - timedelta(days=3), NOW),
        # a day without its year: the latest such day up to today
        ("what did I buy on March 3?", "on March 3", _day(2025, 3, 3), _day(2025, 3, 4)),
        ("on the 3rd of March", "on the 3rd of March", _day(2025, 3, 3), _day(2025, 3, 4)),
        ("the party on December 25th", "on December 25th", _day(2024, 12, 25), _day(2024, 12, 26)),
        ("a leap day, Feb 29", "Feb 29", _day(2024, 2, 29), _day(2024, 3, 1)),
        # holidays: the latest up to today, or of the year named
        ("dinner on Valentine’s day", "Valentine’s day", _day(2025, 2, 14), _day(2025, 2, 15)),
        ("gifts at Christmas 2023", "Christmas 2023", _day(2023, 12, 25), _day(2023, 12, 26)),
        ("since Thanksgiving", "Thanksgiving", _day(2024, 11, 28), _day(2024, 11, 29)),
        ("the Maundy Thursday service", "Maundy Thursday", _day(2025, 4, 17), _day(2025, 4, 18)),
        ("fasting from Ash Wednesday", "Ash Wednesday", _day(2025, 3, 5), _day(2025, 3, 6)),
        ("the 4th of July barbecue", "the 4th of July", _day(2024, 7, 4), _day(2024, 7, 5)),
        # weekends (NOW is a Wednesday), nights, loose counts, spans of months
        ("the game I beat last weekend", "last weekend", _day(2025, 6, 14), _day(2025, 6, 16)),
        ("what happened over the weekend", "over the weekend", _day(2025, 6, 14), _day(2025, 6, 16)),
        ("plans for this weekend", "this weekend", _day(2025, 6, 21), _day(2025, 6, 23)),
        ("the film I saw last night", "last night", _day(2025, 6, 17), _day(2025, 6, 18)),
        ("a couple of weeks ago", "a couple of weeks ago", _day(2025, 5, 28), _day(2025, 6, 12)),
        ("my mileage a few months ago", "a few months ago", _day(2025, 3, 5), _day(2025, 4, 5)),
        ("plants in the past few months", "in the past few months", _day(2025, 3, 18) + timedelta(hours=15.5), NOW),
        ("museums in the month of February", "in the month of February", _day(2025, 2, 1), _day(2025, 3, 1)),
        ("rides from July to October", "from July to October", _day(2024, 7, 1), _day(2024, 11, 1)),
        ("between Nov and Feb", "between Nov and Feb", _day(2024, 11, 1), _day(2025, 3, 1)),
        ("between March and May 2023", "between March and May 2023", _day(2023, 3, 1), _day(2023, 6, 1)),
    ],
)
def test_date_expressions_name_their_window(query: str, text: str, start: datetime, end: datetime) -> None:
    window = find_window(query, NOW)
    assert window is not None and (window.text, window.start, window.end) == (text, start, end)


@pytest.mark.parametrize(
    "query",
    ["it may rain", "we march on", "error 2023 in the parser", "the 2023-02-30 entry", "retry policy", "next steps",
     "it may 2x the load", "we march 3 abreast", "a few notes", "the weekend plan doc is in git"],
)
def test_words_that_only_look_like_dates_name_no_window(query: str) -> None:
    assert find_window(query, NOW) is None


def test_a_question_about_time_names_an_open_window_and_a_reference_moves_the_window() -> None:
    asks = find_window("When did we move the office?", NOW)
    assert asks is not None and (asks.text, asks.start, asks.end) == ("When did", None, None)
    in_window = find_window("when did we ship last May", NOW)
    assert in_window is not None and in_window.start == _day(2025, 5, 1)
    assert find_window("last May", _day(2025, 5, 20)).start == _day(2024, 5, 1)  # type: ignore[union-attr]
    assert find_window("yesterday", NOW.astimezone()).start == _day(2025, 6, 17)  # type: ignore[union-attr]


async def test_a_search_with_a_date_expression_ranks_what_falls_in_it_higher_and_says_so(
    connect: ClientFactory,
) -> None:
    me = await connect(new_ai())
    word = _word()
    undated = await me.create_bead(f"Moved the office {word}", "to the new building")
    dated = await me.create_bead(f"Moved the office {word}", "to the new building",
                                 valid_from=datetime(2023, 5, 10, tzinfo=UTC))
    plain = await me.search_beads(f"moved the office {word}", mode="keyword")
    assert {h.bead.bead_id for h in plain.hits} == {undated.bead_id, dated.bead_id} and plain.date_window is None
    result = await me.search_beads(f"where did we move the office in May 2023 {word}", mode="keyword")
    assert result.date_window is not None
    assert (result.date_window.text, result.date_window.start, result.date_window.end) == (
        "May 2023", _day(2023, 5, 1), _day(2023, 6, 1))
    assert [h.bead.bead_id for h in result.hits] == [dated.bead_id, undated.bead_id]
    top, second = result.hits
    assert any(n.startswith("date: in 2023-05-01..2023-05-31") for n in top.explanation.notes)
    assert not any(n.startswith("date:") for n in second.explanation.notes)
    assert top.score > second.score
    asks = await me.search_beads(f"when did we move the office {word}", mode="keyword")
    assert asks.date_window is not None and asks.date_window.start is None
    assert next(h.bead.bead_id for h in asks.hits) == dated.bead_id



async def test_a_bead_of_the_window_is_found_behind_more_beads_of_other_times_than_a_search_reads(
    connect: ClientFactory,
) -> None:
    """Each list is read to a depth (50) before fusion; a question naming a month also reads the beads dated in
    it, scored as their list scores them, so a weaker bead of then still comes first."""
    me = await connect(new_ai())
    word = _word()
    other_times = [
        {"title": f"Hiked the ridge trail {word}", "content": f"hiked the ridge trail again {word}, a long hike",
         "valid_from": _day(2022, 1, 1) + timedelta(days=3 * i)}
        for i in range(80)
    ]
    then = {"title": f"Hiked the ridge trail {word}", "content": "a short walk", "valid_from": _day(2023, 6, 12)}
    created = await me.create_beads([*other_times, then])
    in_june = created[-1].bead_id
    plain = await me.search_beads(f"hiked the ridge trail {word}", limit=60)
    assert in_june not in [h.bead.bead_id for h in plain.hits]  # below the depth of both lists
    dated = await me.search_beads(f"when did I hike the ridge trail in June 2023 {word}", limit=5)
    assert dated.hits[0].bead.bead_id == in_june
    assert any(n.startswith("date: in 2023-06-01..2023-06-30") for n in dated.hits[0].explanation.notes)


async def test_when_each_candidate_held_is_what_screening_read_and_the_graph_tells_the_rest(
    connect: ClientFactory, hub: HubContext,
) -> None:
    me = await connect(new_ai())
    word = _word()
    in_may = (await me.create_bead(f"Moved the office {word}", valid_from=datetime(2023, 5, 10, tzinfo=UTC))).bead_id
    undated = (await me.create_bead(f"Moved the office {word}")).bead_id
    may = DateWindow(text="May 2023", start=_day(2023, 5, 1), end=_day(2023, 6, 1), boost=DATE_BOOST)
    asks = DateWindow(text="When did", start=None, end=None, boost=DATE_BOOST)

    def boosted(fused: dict[str, Fused]) -> list[str]:
        return [bead_id for bead_id, entry in fused.items() if entry.relevance == DATE_BOOST]

    for window in (may, asks):  # screened without dates: the graph tells
        fused = {in_may: Fused(in_may, 1.0), undated: Fused(undated, 1.0)}
        await boost_window(hub, me.ai_id, fused, window, {in_may: {}, undated: {}})
        assert boosted(fused) == [in_may]
    # What screening read is what counts (the graph is not asked): here it says the other one held in May.
    screened = {in_may: {"valid_from": None, "created_at": 0},
                undated: {"valid_from": to_ms(_day(2023, 5, 20)), "created_at": 0}}
    for window in (may, asks):
        fused = {in_may: Fused(in_may, 1.0), undated: Fused(undated, 1.0)}
        await boost_window(hub, me.ai_id, fused, window, screened)
        assert boosted(fused) == [undated]
    fused = {undated: Fused(undated, 1.0)}  # no valid_from: when it was written
    written_in_may = {undated: {"valid_from": None, "created_at": to_ms(_day(2023, 5, 2))}}
    await boost_window(hub, me.ai_id, fused, may, written_in_may)
    assert boosted(fused) == [undated]


async def test_a_date_window_searches_the_vector_sets_holding_some_beads_of_then_but_not_most(
    connect: ClientFactory, hub: HubContext, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The beads of a window are looked for in each list again, restricted to it; a vector set with no bead of then
    is not searched (a filtered search of it would read far more of it than a plain one to find nothing), nor
    one most of whose beads are of then (the vector list holds their best already)."""
    ops, me = await connect(new_ai("o")), await connect(new_ai())
    group = await ops.create_group("dated")
    await ops.add_member(group.group_id, me.ai_id)
    word = _word()
    in_may = await me.create_bead(f"Moved the office {word}", valid_from=datetime(2023, 5, 10, tzinfo=UTC))
    for year in (2020, 2021):
        await me.create_bead(f"Painted the office {word}", valid_from=datetime(year, 1, 10, tzinfo=UTC))
    await me.create_bead(f"Moved the office {word}", "again", group_id=group.group_id, visibility="group",
                         valid_from=datetime(2022, 1, 10, tzinfo=UTC))
    await hub.keywords.catch_up()
    scopes = mine, ours = [f"private:{me.ai_id}", f"group:{group.group_id}"]
    may, june, in_2022 = to_ms(_day(2023, 5, 1)), to_ms(_day(2023, 6, 1)), to_ms(_day(2022, 1, 1))
    assert hub.keywords.dated_counts(scopes, may, june) == {mine: (1, 3), ours: (0, 1)}
    assert hub.keywords.dated_counts(scopes, in_2022, may) == {mine: (0, 3), ours: (1, 1)}

    searched: list[list[str]] = []
    plain_search = hub.vectors.search

    async def search(scopes: list[str], vector: Any, k: int, filter_expr: str | None = None) -> list[Any]:
        if filter_expr is not None:  # a window's (a bead's settle may search its own scope meanwhile, unfiltered)
            searched.append(list(scopes))
        return await plain_search(scopes, vector, k, filter_expr)

    monkeypatch.setattr(hub.vectors, "search", search)
    vector = (await hub.embedder.embed_queries(["moved the office"]))[0]
    for window, expected in (((may, june), [[mine]]), ((in_2022, may), [])):  # 2022: all of the group's beads
        searched.clear()
        lists: dict[str, list[tuple[str, float]]] = {"keyword": [], "vector": []}
        await _add_dated(hub, scopes, f"moved the office {word}", vector, BeadFilters(), 50, window, lists, {})
        assert searched == expected, window
    monkeypatch.undo()
    found = await me.search_beads(f"where did we move the office in May 2023 {word}", limit=5)
    assert found.hits[0].bead.bead_id == in_may.bead_id
    assert any(n.startswith("date: in 2023-05-01..2023-05-31") for n in found.hits[0].explanation.notes)


async def test_date_expressions_are_read_against_the_time_a_question_is_asked(connect: ClientFactory) -> None:
    """A question asked of memories from long ago ("last week", "yesterday" as of then) names its reference
    time; search and context both read the query's dates against it."""
    me = await connect(new_ai())
    word = _word()
    asked = datetime(2023, 3, 15, 18, 0, tzinfo=UTC)
    earlier = await me.create_bead(f"Ran the load test {word}", "p99 was 40 ms",
                                   valid_from=datetime(2023, 2, 1, tzinfo=UTC))
    last_week = await me.create_bead(f"Ran the load test {word}", "p99 was 25 ms",
                                     valid_from=datetime(2023, 3, 9, tzinfo=UTC))
    result = await me.search_beads(f"the load test last week {word}", mode="keyword", reference_time=asked)
    assert result.date_window is not None
    assert (result.date_window.start, result.date_window.end) == (_day(2023, 3, 6), _day(2023, 3, 13))
    ours = {last_week.bead_id, earlier.bead_id}  # other tests' global beads may say "load test" or "week" too
    assert [h.bead.bead_id for h in result.hits if h.bead.bead_id in ours] == [last_week.bead_id, earlier.bead_id]
    now = await me.search_beads(f"the load test last week {word}", mode="keyword")
    assert now.date_window is not None and now.date_window.start != result.date_window.start
    block = await me.context(f"the load test last week {word}", max_tokens=200, reference_time=asked)
    assert block.bead_ids[0] == last_week.bead_id
