"""Retrieval quality floors: small fixed sets of the shape of both dev sets (tests/data/retrieval/), asked
through the bus of the session's hub with its default embedder, as `recall eval` asks the dev sets.

Each floor sits below what the engine measured on the set when it was set (in the comment beside it) by about
one question's worth: a real ranking regression — a list lost from the fusion, a scope filter too wide,
sessions mapped wrongly, the embedder reading the wrong text — breaks it; one question either way does not.
Keyword and vector search have floors of their own, so that hybrid search cannot hide one of them breaking."""

from __future__ import annotations

from recall_hub.bench.locomo import run_locomo
from recall_hub.bench.longmemeval import run_longmemeval
from recall_hub.context import HubContext
from recall_hub.tooling.stack import EmbeddedStack

from tests.conftest import repo_root

DATA = repo_root() / "tests" / "data" / "retrieval"

LOCOMO_FLOORS = {  # 16 questions: one is 0.0625 of sess@1
    "hybrid+priors": {"recall_at_10": 0.65, "session_hit_at_1": 0.75},  # measured 0.771 / 0.875
    "keyword": {"recall_at_10": 0.62, "session_hit_at_1": 0.75},  # 0.740 / 0.875
    "vector": {"recall_at_10": 0.58, "session_hit_at_1": 0.50},  # 0.708 / 0.625
}
LONGMEMEVAL_FLOORS = {  # 6 questions: one is 0.167 of a session metric
    "hybrid+priors": {"any@1": 0.83, "any@5": 0.83, "all@5": 0.83, "turn R@10": 0.80},  # 1.0 / 1.0 / 1.0 / 0.933
    "keyword": {"any@1": 0.83, "any@5": 0.83, "all@5": 0.66, "turn R@10": 0.80},  # 1.0 / 1.0 / 0.833 / 0.933
    "vector": {"any@1": 0.66, "any@5": 0.83, "all@5": 0.66, "turn R@10": 0.58},  # 0.833 / 1.0 / 0.833 / 0.711
}


async def test_a_locomo_shaped_conversation_keeps_its_floors(stack: EmbeddedStack, hub: HubContext) -> None:
    report = await run_locomo(DATA / "locomo_shaped", stack.nats_url, modes=tuple(LOCOMO_FLOORS), plain=True)
    assert report.questions == 16
    measured = {mode: {name: getattr(report.metrics(mode), name) for name in LOCOMO_FLOORS[mode]}
                for mode in LOCOMO_FLOORS}
    below = {(mode, name) for mode, floors in LOCOMO_FLOORS.items() for name, floor in floors.items()
             if measured[mode][name] < floor}
    assert not below, f"below the floor: {sorted(below)}; measured {measured}"


async def test_a_longmemeval_slice_keeps_its_floors(stack: EmbeddedStack, hub: HubContext) -> None:
    report = await run_longmemeval(DATA / "longmemeval", stack.nats_url, modes=tuple(LONGMEMEVAL_FLOORS))
    assert report.questions == 6 and len(report.types) == 6
    measured = {
        mode: {name: report.score(mode, name) for name in floors} for mode, floors in LONGMEMEVAL_FLOORS.items()
    }
    below = {(mode, name) for mode, floors in LONGMEMEVAL_FLOORS.items() for name, floor in floors.items()
             if measured[mode][name] < floor}
    assert not below, f"below the floor: {sorted(below)}; measured {measured}"
