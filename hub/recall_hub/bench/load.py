"""`recall bench --suite load`: a team of agents working at once, each with its own identity and connection.

A stack from the wheels with the hub in processes of their own (as `recall up` runs them; one, then two hub
processes sharing the work through NATS queue groups). Before timing, each agent writes its share of a seed
memory (group, private and global beads in sessions of its own, teams of :data:`TEAM` agents sharing a group).
Then, for a fixed time per level, every agent does a realistic mix of work (:data:`MIX`): hybrid and keyword
searches, token-budgeted context, gets, creates, session events through JetStream and a few traversals — on
beads it may see.

- **Quiet**: one agent, one request at a time: the p99 every level is compared with.
- **Closed loop** at each ``--agents`` level: every agent sends its next request as soon as the last is
  answered — the most the hub serves with that many callers, and what a caller waits at that load.
- **Open loop** at ``--rate`` requests/s spread over the same agents (Poisson arrivals, each request timed
  from when it was due, so a hub that falls behind shows it in the latencies instead of slowing the load).

Per level: throughput, p50/p99 overall and per operation, errors by code (a request not answered within the
client's timeout is an error). The knee of each loop is the first level whose p99 is more than twice the
quiet p99. The load generator shares the machine's cores with the servers: on 2 cores its own Python work
(building and parsing every request of every agent) is part of what the hubs compete with.
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from recall_client import RecallClient
from recall_schemas import CreateBead, CreatedItem, RecallError, Visibility

from recall_hub.bench.corpus import build_dataset
from recall_hub.bench.cpu import MAIN_THREAD, CpuMeter, whole_processes
from recall_hub.bench.stats import percentile
from recall_hub.tooling.stack import EmbeddedStack

MIX: tuple[tuple[str, int], ...] = (
    ("search", 30), ("get", 25), ("create", 12), ("context", 10), ("event", 10), ("keyword", 8), ("traverse", 5),
)
"""Operations and their weights (percent of requests)."""
TEAM = 8
"""Agents per group."""
SEED_PER_AGENT = 40
"""Beads each agent writes before timing starts."""
SEEDING_AT_ONCE = 4
"""Agents writing their seed beads at a time (all at once, the embedder's queue outlasts the client timeout)."""
OPEN_DRAIN_S = 15.0
SETTLED_IN_A_ROW = 10
SETTLE_LIMIT_S = 120.0
"""How long an open-loop level waits for its last requests after it stops sending."""
IDLE_CORES = 0.15
IDLE_READING_S = 0.3
"""Before the quiet level, the hubs count as idle below this many cores, read every this many seconds."""


@dataclass
class LoadConfig:
    agents: tuple[int, ...] = (8, 32, 128)
    hubs: tuple[int, ...] = (1, 2)
    seconds: float = 15.0
    """Timed length of each level."""
    rate: float = 400.0
    """Open-loop requests/s (0: no open-loop levels)."""
    embedder: str = "local"
    create_settle: str = "background"
    """The hubs' ``RECALL_CREATE_SETTLE``."""
    seed: int = 7
    timeout: float = 10.0
    """The agents' per-request timeout."""


@dataclass
class OpStats:
    op: str
    n: int
    errors: int
    p50_ms: float
    p99_ms: float


@dataclass
class LoadLevel:
    hubs: int
    agents: int
    loop: str
    """``quiet``, ``closed`` or ``open``."""
    target_rate: float | None
    seconds: float
    """From the level's first request to its last answer."""
    requests: int
    throughput: float
    """Answered requests per second (errors not counted)."""
    p50_ms: float
    p99_ms: float
    errors: int
    error_codes: dict[str, int]
    ops: list[OpStats]
    cpu_ms: dict[str, float] = field(default_factory=dict)
    """CPU milliseconds per answered request, by process kind (:func:`meter`), over the level; empty where
    ``/proc`` cannot be read."""

    @property
    def cores_busy(self) -> float:
        """The machine's cores the level kept busy, on average (the processes measured)."""
        return whole_processes(self.cpu_ms) * self.throughput / 1000


@dataclass
class LoadReport:
    config: LoadConfig
    levels: list[LoadLevel] = field(default_factory=list)
    setup: str = ""

    def knee(self, hubs: int, loop: str) -> int | None:
        """The fewest agents whose p99 is above twice the quiet p99 (None: no level is)."""
        quiet = next((lv for lv in self.levels if lv.hubs == hubs and lv.loop == "quiet"), None)
        if quiet is None:
            return None
        return next((lv.agents for lv in self.levels
                     if lv.hubs == hubs and lv.loop == loop and lv.p99_ms > 2 * quiet.p99_ms), None)

    @property
    def knees(self) -> dict[str, int | None]:
        return {f"{hubs} hub(s), {loop} loop": self.knee(hubs, loop)
                for hubs in self.config.hubs for loop in ("closed", "open")}


@dataclass
class Agent:
    """One identity of the team, with its own connection, group, session and the beads it may see."""

    client: RecallClient
    group_id: str
    session_id: str
    visible: list[str]
    rng: random.Random


class Team:
    """The agents of one stack, their seed memory and the words their requests are made of."""

    def __init__(self, agents: list[Agent], words: Callable[[random.Random, int], str]) -> None:
        self.agents = agents
        self.words = words

    async def do(self, agent: Agent, op: str) -> None:
        """One request of the mix (:data:`MIX`), shaped as the suite sends it."""
        rng, client = agent.rng, agent.client
        if op == "search":
            await client.search_beads(self.words(rng, rng.choice((2, 3, 4))), limit=10)
        elif op == "keyword":
            await client.search_beads(self.words(rng, rng.choice((1, 2, 3))), limit=10, mode="keyword")
        elif op == "context":
            await client.context(self.words(rng, 3), max_tokens=800)
        elif op == "get":
            await client.get_bead(rng.choice(agent.visible))
        elif op == "traverse":
            await client.traverse_graph(rng.choice(agent.visible), max_depth=2, limit=50)
        elif op == "create":
            bead = await client.create_bead(**_bead(rng, agent, self.words).model_dump(exclude_none=True))
            agent.visible.append(bead.bead_id)
        elif op == "event":
            await client.events.session_continued(agent.session_id, event_id=uuid.uuid4().hex)
        else:
            raise ValueError(f"unknown operation {op!r}")


def _bead(rng: random.Random, agent: Agent, words: Callable[[random.Random, int], str]) -> CreateBead:
    roll = rng.random()
    visibility = Visibility.GROUP if roll < 0.5 else Visibility.PRIVATE if roll < 0.8 else Visibility.GLOBAL
    return CreateBead(
        title=words(rng, rng.randint(4, 9)), content=words(rng, rng.randint(28, 70)),
        importance=rng.randint(2, 8), session_id=agent.session_id, visibility=visibility,
        group_id=agent.group_id if visibility is Visibility.GROUP else None,
    )


async def run_load(config: LoadConfig, progress: Callable[[str], None] = lambda line: None) -> LoadReport:
    report = LoadReport(config, setup=(
        f"embedded stack (nats-server, redis-server 8 + FalkorDB from their wheels, loopback); hubs in processes of "
        f"their own, embedder {config.embedder}, creates settled {config.create_settle}; agents in one process, one "
        f"connection each; {SEED_PER_AGENT} seed beads per agent"))
    for hubs in config.hubs:
        with tempfile.TemporaryDirectory(prefix="recall-load-") as tmp:
            env = {"RECALL_EMBEDDER__KIND": config.embedder, "RECALL_CREATE_SETTLE": config.create_settle}
            with EmbeddedStack(Path(tmp), hubs=hubs, hub_env=env) as stack:
                team = await _team(config, stack.nats_url, max(config.agents), progress)
                try:
                    cpu = meter(stack)
                    await _until_idle(cpu)
                    await _levels(config, team, hubs, report, progress, cpu)
                finally:
                    await asyncio.gather(*(agent.client.close() for agent in team.agents))
    return report


async def _until_idle(cpu: CpuMeter) -> None:
    """Wait until the hubs have worked off the seed memory (its vectors, links and index commits run on after
    the seeding's replies), at most :data:`SETTLE_LIMIT_S`: the quiet level is what every other level is
    compared with. Idle: the hubs' processes below :data:`IDLE_CORES` for :data:`SETTLED_IN_A_ROW` readings."""
    deadline = time.monotonic() + SETTLE_LIMIT_S
    calm = 0
    before, at = cpu.read(), time.monotonic()
    while calm < SETTLED_IN_A_ROW and time.monotonic() < deadline:
        await asyncio.sleep(IDLE_READING_S)
        now, now_at = cpu.read(), time.monotonic()
        busy = CpuMeter.spent(before, now).get("hubs", 0.0) / (now_at - at)
        calm = calm + 1 if busy < IDLE_CORES else 0
        before, at = now, now_at


def meter(stack: EmbeddedStack) -> CpuMeter:
    """The stack's processes by kind, and this one (the agents)."""
    def pids(prefix: str) -> list[int]:
        return [c.pid for c in stack.children if c.name.startswith(prefix) and c.pid is not None]

    return CpuMeter({
        "hubs": pids("hub-"), "hubs" + MAIN_THREAD: pids("hub-"), "redis + FalkorDB": pids("redis"),
        "nats-server": pids("nats"), "agents": [os.getpid()],
    })


async def _levels(config: LoadConfig, team: Team, hubs: int, report: LoadReport,
                  progress: Callable[[str], None], cpu: CpuMeter) -> None:
    runs: list[tuple[str, int, float | None]] = [("quiet", 1, None)]
    for n in config.agents:
        runs.append(("closed", n, None))
        if config.rate > 0:
            runs.append(("open", n, config.rate))
    calm = float("nan")
    for loop, n, rate in runs:
        agents = team.agents[:n]
        cpu_before = cpu.read()
        started = time.perf_counter()
        if loop == "open":
            assert rate is not None
            samples = await _open_loop(team, agents, rate, config.seconds, config.seed)
        else:
            samples = await _closed_loop(team, agents, config.seconds / 2 if loop == "quiet" else config.seconds)
        # Throughput over the whole time the level's requests took: an open loop the hubs cannot keep up with
        # is answered for a while after it stops sending.
        level = _level(hubs, n, loop, rate, time.perf_counter() - started, samples)
        answered = level.throughput * level.seconds
        if answered:
            level.cpu_ms = {kind: 1000 * seconds / answered
                            for kind, seconds in CpuMeter.spent(cpu_before, cpu.read()).items()}
        report.levels.append(level)
        if loop == "quiet":
            calm = level.p50_ms
        else:
            await _settle(team, calm)
        progress(f"  {hubs} hub(s) {loop:6s} {n:4d} agents: {level.throughput:7.1f} req/s, "
                 f"p50 {level.p50_ms:.1f} ms, p99 {level.p99_ms:.1f} ms, errors {level.errors}, "
                 f"{level.cores_busy:.2f} cores busy")


_Sample = tuple[str, float, str | None]
"""(operation, milliseconds, error code or None)."""


async def _timed(team: Team, agent: Agent, op: str, since: float) -> _Sample:
    try:
        await team.do(agent, op)
        error = None
    except RecallError as exc:
        error = exc.code.value
    except TimeoutError:
        error = "timeout"
    except Exception as exc:  # a transport failure is counted, not hidden
        error = type(exc).__name__
    return op, (time.perf_counter() - since) * 1000, error


async def _settle(team: Team, quiet_p50_ms: float) -> None:
    """Wait until the hubs have worked off what a level left queued (an open loop past the hubs' capacity leaves
    requests the agents gave up on): until :data:`SETTLED_IN_A_ROW` gets in a row answer within twice the quiet
    p50 of the mix, or :data:`SETTLE_LIMIT_S` have passed."""
    agent, in_a_row = team.agents[0], 0
    give_up = time.perf_counter() + SETTLE_LIMIT_S
    while in_a_row < SETTLED_IN_A_ROW and time.perf_counter() < give_up:
        _, ms, error = await _timed(team, agent, "get", time.perf_counter())
        in_a_row = in_a_row + 1 if error is None and ms <= 2 * quiet_p50_ms else 0


def _draw(rng: random.Random) -> str:
    return rng.choices([op for op, _ in MIX], weights=[w for _, w in MIX])[0]


async def _closed_loop(team: Team, agents: list[Agent], seconds: float) -> list[_Sample]:
    stop = time.perf_counter() + seconds
    samples: list[_Sample] = []

    async def work(agent: Agent) -> None:
        while time.perf_counter() < stop:
            samples.append(await _timed(team, agent, _draw(agent.rng), time.perf_counter()))

    await asyncio.gather(*(work(agent) for agent in agents))
    return samples


async def _open_loop(team: Team, agents: list[Agent], rate: float, seconds: float, seed: int) -> list[_Sample]:
    rng = random.Random(f"{seed}/{len(agents)}")  # the arrivals: the same for a seed and a level
    start = time.perf_counter()
    due = start
    tasks: list[asyncio.Task[_Sample]] = []
    while True:
        due += rng.expovariate(rate)
        if due - start >= seconds:
            break
        if (wait := due - time.perf_counter()) > 0:
            await asyncio.sleep(wait)  # the arrival schedule itself, not a synchronisation
        agent = rng.choice(agents)
        tasks.append(asyncio.create_task(_timed(team, agent, _draw(agent.rng), due)))
    done, pending = await asyncio.wait(tasks, timeout=OPEN_DRAIN_S) if tasks else (set(), set())
    for task in pending:
        task.cancel()
    return [task.result() for task in done] + [("unanswered", OPEN_DRAIN_S * 1000, "timeout")] * len(pending)


def _level(hubs: int, agents: int, loop: str, rate: float | None, seconds: float, samples: list[_Sample]) -> LoadLevel:
    answered = [ms for _, ms, error in samples if error is None]
    codes = Counter(error for _, _, error in samples if error is not None)
    ops = []
    for op, _ in MIX:
        times = [ms for name, ms, error in samples if name == op and error is None]
        errors = sum(1 for name, _, error in samples if name == op and error is not None)
        if times or errors:
            ops.append(OpStats(op, len(times), errors, _p(times, 50), _p(times, 99)))
    return LoadLevel(
        hubs=hubs, agents=agents, loop=loop, target_rate=rate, seconds=seconds, requests=len(samples),
        throughput=len(answered) / seconds, p50_ms=_p(answered, 50), p99_ms=_p(answered, 99),
        errors=sum(codes.values()), error_codes=dict(codes), ops=ops,
    )


def _p(values: list[float], q: float) -> float:
    return percentile(sorted(values), q) if values else float("nan")


async def _team(config: LoadConfig, url: str, count: int, progress: Callable[[str], None]) -> Team:
    """``count`` agents in teams of :data:`TEAM`, each group made by an ops identity, each agent's seed memory
    written; every agent knows the beads it may see (its own, its team's group beads, the global ones)."""
    data = build_dataset(500, config.seed, "load")
    vocabulary = random.Random(config.seed)

    def words(rng: random.Random, k: int) -> str:
        return data.text(data.draw_words(rng, k))

    ops = RecallClient("o_loadops", url, timeout=config.timeout)
    await ops.connect()
    agents: list[Agent] = []
    try:
        for start in range(0, count, TEAM):
            group = await ops.create_group(f"load team {start // TEAM}")
            members = [f"a_load{i:03d}" for i in range(start, min(start + TEAM, count))]
            for ai_id in members:
                await ops.add_member(group.group_id, ai_id)
                client = RecallClient(ai_id, url, timeout=config.timeout)
                await client.connect()
                agents.append(Agent(client, group.group_id, f"s_{ai_id[2:]}", [],
                                     random.Random(vocabulary.random())))
    finally:
        await ops.close()
    progress(f"  seeding {SEED_PER_AGENT * count} beads from {count} agents")
    plans = [[_bead(agent.rng, agent, words) for _ in range(SEED_PER_AGENT)] for agent in agents]
    writing = asyncio.Semaphore(SEEDING_AT_ONCE)

    async def seed(agent: Agent, plan: list[CreateBead]) -> list[CreatedItem]:
        async with writing:
            return await agent.client.create_beads(plan)

    written = await asyncio.gather(*(seed(agent, plan) for agent, plan in zip(agents, plans, strict=True)))
    by_group: dict[str, list[str]] = {}
    public: list[str] = []
    for agent, plan, items in zip(agents, plans, written, strict=True):
        for bead, item in zip(plan, items, strict=True):
            if item.bead_id is None:
                raise RuntimeError(f"seeding failed for {agent.client.ai_id}: {item.error}")
            agent.visible.append(item.bead_id)
            if bead.visibility is Visibility.GROUP:
                by_group.setdefault(agent.group_id, []).append(item.bead_id)
            elif bead.visibility is Visibility.GLOBAL:
                public.append(item.bead_id)
    for agent in agents:
        own = set(agent.visible)
        agent.visible += [b for b in by_group.get(agent.group_id, []) + public if b not in own]
    return Team(agents, words)


def render_load(report: LoadReport) -> str:
    c = report.config
    lines = [
        f"load: agents {', '.join(map(str, c.agents))}; {c.seconds:g} s a level; open loop at {c.rate:g} req/s; "
        f"mix {', '.join(f'{op} {w}%' for op, w in MIX)}",
        report.setup,
        "",
        "| hubs | loop | agents | req/s | p50 ms | p99 ms | errors | "
        + " | ".join(f"{op} p99" for op, _ in MIX) + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(MIX),
    ]
    for lv in report.levels:
        per_op = {s.op: s for s in lv.ops}
        cells = [f"{per_op[op].p99_ms:.1f}" if op in per_op and per_op[op].n else "-" for op, _ in MIX]
        loop = f"open {lv.target_rate:g}/s" if lv.loop == "open" else lv.loop
        lines.append(f"| {lv.hubs} | {loop} | {lv.agents} | {lv.throughput:.1f} | {lv.p50_ms:.1f} | {lv.p99_ms:.1f} | "
                     f"{lv.errors} | " + " | ".join(cells) + " |")
    kinds = list(dict.fromkeys(kind for lv in report.levels for kind in lv.cpu_ms))
    if kinds:
        lines += ["", "CPU per answered request, ms (from /proc; the hubs' main threads run their Python work):", "",
                  "| hubs | loop | agents | " + " | ".join(kinds) + " | cores busy |",
                  "|---|---|---|" + "---|" * (len(kinds) + 1)]
        for lv in report.levels:
            loop = f"open {lv.target_rate:g}/s" if lv.loop == "open" else lv.loop
            lines.append(f"| {lv.hubs} | {loop} | {lv.agents} | "
                         + " | ".join(f"{lv.cpu_ms[k]:.2f}" if k in lv.cpu_ms else "-" for k in kinds)
                         + f" | {lv.cores_busy:.2f} |")
    lines += ["", "Knee (fewest agents whose p99 is above twice the quiet p99): " + "; ".join(
        f"{where}: {knee if knee is not None else 'none'}" for where, knee in report.knees.items())]
    return "\n".join(lines)
