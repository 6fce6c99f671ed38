"""Date expressions in a search query, as a window of time — a small deterministic parser, no model.

:func:`find_window` reads the first expression it knows in the query, relative to a reference moment
(the time of the search, or its ``as_of``), and answers the window it names, ``[start, end)`` in UTC:

- a day: ``today``, ``yesterday``, ``last night``, ``the day before yesterday``, ``last Monday``, ``on Friday``,
  ``2023-05-07``, ``May 7, 2023``, ``7 May 2023``; without a year (``March 3rd``, ``the 3rd of March``) the
  latest such day up to today; a holiday (``Valentine's Day``, ``Christmas``, ``Thanksgiving``, ``Easter``
  and the days around it, …) its latest day up to today, or of the year it names;
- a week, month or year: ``last week``, ``this month``, ``last year``; a weekend: ``last weekend``, ``over the
  weekend`` (the latest Saturday and Sunday before today), ``this weekend``;
- about then: ``3 days ago`` (a day either side), ``2 weeks ago`` (a week either side), ``a month ago``
  (half a month), ``a year ago`` (four months), ``a couple of weeks ago`` (two), ``a few months ago`` (three)
  — people say these loosely;
- a month: ``last May`` (the latest May before this month), ``in March``, ``the month of March`` (the latest
  March up to this month), ``May 2023``, ``2023-05`` — a month name needs one of these forms, so ``may`` the
  verb is no date; a span of months: ``from July to October``, ``between March and May``;
- a year: ``in 2023``, ``during 2021``;
- a span up to now: ``in the last 3 days``, ``past two weeks``.

A question about time itself (``when did …``, ``what date …``) without such an expression names no
window; it is answered with ``start`` and ``end`` unset, meaning "beads that know when (carry
``valid_from``) matter more". Expressions are English only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

MONTHS = (
    "january february march april may june july august september october november december".split()
)
WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
NUMBERS = {
    "a couple of": 2, "a couple": 2, "a few": 3, "several": 3, "few": 3,
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
}

_MONTH_NAMES = "|".join(MONTHS) + r"|sept|" + "|".join(m[:3] for m in MONTHS)
_MONTH = rf"(?P<month>{_MONTH_NAMES})\.?"
_COUNT = r"(?P<count>\d{1,3}|" + "|".join(n.replace(" ", r"\s+") for n in NUMBERS) + r")"
_UNIT = r"(?P<unit>day|week|month|year)s?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d{2})"
_WEEKDAY = r"(?P<weekday>" + "|".join(WEEKDAYS) + r")"
_APOSTROPHE = "['\u2019]?"
HOLIDAYS: dict[str, tuple[int, int] | str | int] = {
    "valentine's day": (2, 14), "valentine's": (2, 14), "christmas eve": (12, 24), "christmas day": (12, 25),
    "christmas": (12, 25), "xmas": (12, 25), "new year's eve": (12, 31), "new year's day": (1, 1),
    "new year's": (1, 1), "halloween": (10, 31), "independence day": (7, 4), "fourth of july": (7, 4),
    "st. patrick's day": (3, 17), "st patrick's day": (3, 17), "saint patrick's day": (3, 17),
    "thanksgiving": "thanksgiving", "mother's day": "mother", "father's day": "father",
    "memorial day": "memorial", "labor day": "labor", "easter sunday": 0, "easter": 0, "easter monday": 1,
    "good friday": -2, "holy thursday": -3, "maundy thursday": -3, "palm sunday": -7, "ash wednesday": -46,
}
"""Holidays by name: a fixed day (month, day), a US rule, or days from Easter Sunday."""
_HOLIDAY = r"(?P<holiday>" + "|".join(
    sorted((re.escape(h).replace("\\ ", r"\s+").replace("'", _APOSTROPHE) for h in HOLIDAYS), key=len, reverse=True)
) + r")"


@dataclass(frozen=True)
class Window:
    text: str
    """The words of the query that named it."""
    start: datetime | None
    end: datetime | None
    """Exclusive. ``start`` and ``end`` are both None for a question about time with no window."""


def _day(at: datetime) -> datetime:
    return at.replace(hour=0, minute=0, second=0, microsecond=0)


def _month_start(year: int, month: int) -> datetime:
    year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    return datetime(year, month, 1, tzinfo=UTC)


def _month(year: int, month: int) -> tuple[datetime, datetime]:
    return _month_start(year, month), _month_start(year, month + 1)


def _year(year: int) -> tuple[datetime, datetime]:
    return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)


def _one_day(at: datetime) -> tuple[datetime, datetime]:
    return _day(at), _day(at) + timedelta(days=1)


def _week_of(at: datetime) -> tuple[datetime, datetime]:
    start = _day(at) - timedelta(days=at.weekday())
    return start, start + timedelta(days=7)


def _month_number(name: str) -> int:
    return next(i for i, m in enumerate(MONTHS, start=1) if m.startswith(name.lower()[:3]))


def _count(word: str) -> int:
    return int(word) if word.isdigit() else NUMBERS[" ".join(word.lower().split())]


def _shift_months(now: datetime, months: int) -> tuple[int, int]:
    index = now.year * 12 + now.month - 1 - months
    return index // 12, index % 12 + 1


def _period(unit: str, now: datetime, back: int) -> tuple[datetime, datetime]:
    """The calendar ``unit`` (day, week, month, year) ``back`` units before the one holding ``now``."""
    if unit == "day":
        return _one_day(now - timedelta(days=back))
    if unit == "week":
        return _week_of(now - timedelta(weeks=back))
    if unit == "month":
        return _month(*_shift_months(now, back))
    return _year(now.year - back)


def _iso_day(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    return _one_day(datetime(int(m["year"]), int(m["m"]), int(m["day"]), tzinfo=UTC))


def _iso_month(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    return _month(int(m["year"]), int(m["m"]))


def _named_day(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    return _one_day(datetime(int(m["year"]), _month_number(m["month"]), int(m["day"]), tzinfo=UTC))


def _named_month_of_year(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    return _month(int(m["year"]), _month_number(m["month"]))


def _named_month(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    month = _month_number(m["month"])
    qualifier = m["qualifier"].lower()
    qualifier = "in" if qualifier.endswith("month of") else qualifier
    if m["month"].islower() and m["month"].lower() in ("may", "march") and qualifier not in ("last", "this"):
        raise ValueError("a verb, not a month")  # "it may rain", "in march order"
    if qualifier == "this":
        return _month(now.year, month)
    if qualifier == "last":  # the latest such month before the current one
        return _month(now.year if month < now.month else now.year - 1, month)
    return _month(now.year if month <= now.month else now.year - 1, month)  # "in May": up to this month


def _year_only(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    return _year(int(m["year"]))


def _relative_day(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    back = {"today": 0, "tonight": 0, "this": 0, "yesterday": 1, "last": 1, "tomorrow": -1}
    word = m["word"].lower()
    word = word.split()[0] if word.startswith(("this ", "last ")) else word  # "last night", "this morning"
    return _one_day(now - timedelta(days=2 if "before" in word else back[word]))


def _relative_period(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    back = {"last": 1, "this": 0, "next": -1}[m["which"].lower()]
    return _period(m["unit"].lower(), now, back)


AGO_SPREAD = 1.0
""""N units ago" is said loosely: the window runs :data:`AGO_DAYS` (times this) either side of the day N units
back; 0 reads it as the calendar unit instead (the week that held then)."""
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
AGO_DAYS = {"day": 1, "week": 7, "month": 15, "year": 120}
"""Either side of "3 days ago": a day; "two weeks ago": a week; "a month ago": half a month; "a year ago": four
months."""


def _ago(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    unit, count = m["unit"].lower(), _count(m["count"])
    if AGO_SPREAD <= 0:
        return _period(unit, now, count)
    days = _UNIT_DAYS[unit]
    then = _day(now) - timedelta(days=count * days)
    spread = timedelta(days=max(1, round(AGO_SPREAD * AGO_DAYS[unit])))
    return then - spread, then + spread + timedelta(days=1)


def _span_to_now(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    unit, count = m["unit"].lower(), _count(m["count"])
    if unit in ("day", "week"):
        start = now - timedelta(days=count * (7 if unit == "week" else 1))
    elif unit == "month":
        year, month = _shift_months(now, count)
        start = now.replace(year=year, month=month, day=min(now.day, 28))
    else:
        start = now.replace(year=now.year - count, day=min(now.day, 28))
    return start, now


def _weekday(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    wanted = WEEKDAYS.index(m["weekday"].lower())
    if m["which"].lower() == "this":
        return _one_day(_week_of(now)[0] + timedelta(days=wanted))
    back = (now.weekday() - wanted) % 7 or 7  # the latest such day before today
    return _one_day(now - timedelta(days=back))


def _latest_day(month: int, day: int, now: datetime) -> datetime:
    """The latest ``month``/``day`` up to today (a 29 February: of the latest leap year)."""
    for year in range(now.year, now.year - 8, -1):
        try:
            then = datetime(year, month, day, tzinfo=UTC)
        except ValueError:  # 30 February, or 29 February outside a leap year
            continue
        if then <= _day(now):
            return then
    raise ValueError("no such day")


def _month_day(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    """``March 3rd``, ``the 3rd of March``: the latest such day up to today."""
    month = m["month"]
    ordinal = not m["day"].isdigit() or re.search(r"\d(?:st|nd|rd|th)\b", m.group(0), re.I)
    if month.islower() and month.lower() in ("may", "march", "mar") and not (ordinal or m["on"]):
        raise ValueError("a verb, not a month")  # "it may 2x the load"
    return _one_day(_latest_day(_month_number(month), int(m["day"]), now))


def _easter(year: int) -> datetime:
    """Easter Sunday of ``year`` (Gregorian; the anonymous computus)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = divmod(b, 4)
    g = (8 * b + 13) // 25
    h = (19 * a + b - d - g + 15) % 30
    i, k = divmod(c, 4)
    l_ = (32 + 2 * e + 2 * i - h - k) % 7
    m = (a + 11 * h + 22 * l_) // 451
    month, day = divmod(h + l_ - 7 * m + 114, 31)
    return datetime(year, month, day + 1, tzinfo=UTC)


def _nth_weekday(year: int, month: int, weekday: int, n: int) -> datetime:
    """The ``n``-th ``weekday`` (0 Monday) of a month; ``n`` -1 the last."""
    if n < 0:
        last = _month_start(year, month + 1) - timedelta(days=1)
        return last - timedelta(days=(last.weekday() - weekday) % 7)
    first = datetime(year, month, 1, tzinfo=UTC)
    return first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))


_US_RULES = {"thanksgiving": (11, 3, 4), "mother": (5, 6, 2), "father": (6, 6, 3), "memorial": (5, 0, -1),
             "labor": (9, 0, 1)}


def _holiday_of(name: str, year: int) -> datetime:
    rule = HOLIDAYS[name]
    if isinstance(rule, tuple):
        return datetime(year, *rule, tzinfo=UTC)
    if isinstance(rule, str):
        return _nth_weekday(year, *_US_RULES[rule])
    return _easter(year) + timedelta(days=rule)


def _holiday(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    name = re.sub(r"\s+", " ", m["holiday"].lower().replace("\u2019", "'"))
    name = next((h for h in HOLIDAYS if h.replace("'", "") == name.replace("'", "")), name)
    if m["year"]:
        return _one_day(_holiday_of(name, int(m["year"])))
    for year in (now.year, now.year - 1):
        then = _holiday_of(name, year)
        if then <= _day(now):
            return _one_day(then)
    raise ValueError("no such day")


def _weekend(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    """``this weekend``: the Saturday and Sunday of this week; ``last weekend``, ``over the weekend``: the latest
    Saturday and Sunday before this week (said on a weekend, ``over the weekend`` is this one)."""
    monday = _week_of(now)[0]
    which = " ".join(m["which"].lower().split())
    if which == "this" or (which != "last" and now.weekday() >= 5):
        return monday + timedelta(days=5), monday + timedelta(days=7)
    return monday - timedelta(days=2), monday


def _month_span(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    """``from July to October``: the first month's start to the second's end, the latest such span up to this
    month (or in the year named)."""
    first, last = _month_number(m["month"]), _month_number(m["month2"])
    if m["year"]:
        end_year = int(m["year"])
    else:
        end_year = now.year if last <= now.month else now.year - 1
    start_year = end_year if first <= last else end_year - 1
    return _month(start_year, first)[0], _month(end_year, last)[1]


_RULES = [
    (re.compile(rf"\b{_YEAR}-(?P<m>0[1-9]|1[0-2])-{_DAY}\b"), _iso_day),
    (re.compile(rf"\b{_YEAR}-(?P<m>0[1-9]|1[0-2])\b(?!-\d)"), _iso_month),
    (re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.I), _named_day),
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.I), _named_day),
    (re.compile(rf"\b(?:from|between)\s+{_MONTH}\s+(?:to|and|until|till|through|thru)\s+"
                rf"(?P<month2>{_MONTH_NAMES})\.?(?:,?\s+{_YEAR})?(?!\w)", re.I), _month_span),
    (re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.I), _named_month_of_year),
    (re.compile(rf"\b{_HOLIDAY}(?:,?\s+(?:of\s+)?{_YEAR})?(?!\w)", re.I), _holiday),
    (re.compile(rf"\b(?P<on>on\s+)?{_MONTH}\s+{_DAY}\b", re.I), _month_day),
    (re.compile(rf"\b(?P<on>on\s+)?(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH}(?!\w)", re.I), _month_day),
    (re.compile(rf"\b(?P<qualifier>last|this|in|during|early|late|mid|(?:in\s+|during\s+)?the\s+month\s+of)\s+"
                rf"{_MONTH}(?!\w)", re.I), _named_month),
    (re.compile(rf"\b(?:in|during|throughout|of|the\s+year)\s+{_YEAR}\b", re.I), _year_only),
    (re.compile(r"\b(?P<word>(?:the\s+)?day\s+before\s+yesterday|today|yesterday|tomorrow|tonight|last\s+night|"
                r"this\s+(?:morning|afternoon|evening))\b", re.I), _relative_day),
    (re.compile(r"\b(?P<which>last|this|past|(?:over|on|at)\s+the)\s+weekend\b", re.I), _weekend),
    (re.compile(rf"\b(?:in\s+the\s+|over\s+the\s+)?(?:last|past)\s+{_COUNT}\s+{_UNIT}\b", re.I), _span_to_now),
    (re.compile(r"\b(?P<which>last|this|next)\s+(?P<unit>week|month|year)\b", re.I), _relative_period),
    (re.compile(rf"\b{_COUNT}\s+{_UNIT}\s+ago\b", re.I), _ago),
    (re.compile(rf"\b(?P<which>last|on|this)\s+{_WEEKDAY}\b", re.I), _weekday),
]
_ASKS_WHEN = re.compile(
    r"\b(?:when\s+(?:did|was|were|is|are|do|does|will|had|has|have)|what\s+(?:date|day|year|month|time)|"
    r"how\s+long\s+ago)\b",
    re.I,
)


def find_window(query: str, now: datetime) -> Window | None:
    """The window of the first date expression in ``query`` (relative to ``now``, a UTC moment), a
    window-less :class:`Window` for a question about time, or None."""
    now = now.astimezone(UTC)
    for pattern, window_of in _RULES:
        match = pattern.search(query)
        if match is None:
            continue
        try:
            start, end = window_of(match, now)
        except ValueError:  # a date that does not exist (2023-02-30): not a date expression
            continue
        return Window(" ".join(match.group(0).split()), start, end)
    asks = _ASKS_WHEN.search(query)
    return Window(" ".join(asks.group(0).split()), None, None) if asks else None
