"""`recall`: run the embedded stack, the hub, the demo, the benchmark and the schema export.

Why this module is long (~800 lines): it is the argument parser of every command and a thin function per
command that calls into the package (each imports what it needs lazily, so `recall --help` stays fast);
the work itself lives in the modules those functions call."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recall_hub.config import HubSettings
from recall_hub.logs import LOG_FORMATS, format_from_env
from recall_hub.logs import configure as configure_logging
from recall_hub.tooling.collect import add_collect_commands
from recall_hub.tooling.stack import (
    APPENDFSYNC,
    DURABILITY,
    Durability,
    EmbeddedStack,
    StackError,
    default_data_dir,
    holds_data,
    process_alive,
    running_state,
)
from recall_hub.tooling.supervisor import Supervisor

if TYPE_CHECKING:
    from recall_hub.service.endpoints import HubService
    from recall_hub.tooling.auth import AuthBundle

log = logging.getLogger("recall")


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


def _secure_setup(args: argparse.Namespace, data_dir: Path) -> tuple[AuthBundle, Path, Path]:
    """``(bundle, roster, auth_dir)`` for ``up --secure``, (re)generated from the roster (idempotent)."""
    from recall_hub.tooling.auth import AuthError, generate

    auth_dir = Path(args.auth_dir).expanduser() if args.auth_dir else data_dir / "auth"
    roster = Path(args.roster).expanduser() if args.roster else auth_dir / "roster.yaml"
    if not roster.exists():
        raise AuthError(
            f"no roster at {roster}; run `recall auth init --roster roster.yaml --out {auth_dir}` first (or --roster)"
        )
    return generate(roster, auth_dir), roster, auth_dir


def _data_dir(args: argparse.Namespace) -> Path:
    return Path(args.data_dir).expanduser()


async def _tours(nats_url: str, auth_dir: Path | None, roster: Path | None) -> bool:
    """The visibility tour and the coordination scenario; with credentials when auth is on."""
    from recall_client import RecallClient

    from recall_hub.tooling.demo import plain_connect, random_ids, run_demo
    from recall_hub.tooling.scenario import run_scenario

    if auth_dir is None or roster is None:
        connect, ids = plain_connect(nats_url), random_ids()
    else:
        from recall_hub.tooling.auth import load_roster

        creds_dir = auth_dir / "creds"
        team = load_roster(roster)
        agents = list(team.agents)
        if not team.ops or len(agents) < 3:
            print("the roster needs an ops and three agents for the demo", file=sys.stderr)
            return False

        async def connect(ai_id: str) -> RecallClient:
            return await RecallClient(ai_id, nats_url, creds=str(creds_dir / f"{ai_id}.creds")).connect()

        ids = (team.ops[0], agents[0], agents[1], agents[2])
    print("\n== who can recall what ==")
    await run_demo(connect, ids)
    print("\n== coordination scenario ==")
    result = await run_scenario(connect, ids[0], ids[1], ids[2])
    return result.ok


async def _up(args: argparse.Namespace) -> int:
    from recall_hub.tooling.auth import AuthError

    data_dir = _data_dir(args)
    bundle: AuthBundle | None = None
    if args.secure:
        try:
            bundle, roster, auth_dir = _secure_setup(args, data_dir)
        except AuthError as exc:
            print(f"recall up --secure: {exc}", file=sys.stderr)
            return 1
    earlier = holds_data(data_dir) and not args.fresh
    failed = False
    hub_env = {"RECALL_NATS_CREDS": str(bundle.hub_creds), "RECALL_AUTH_REQUIRED": "true"} if bundle else {}
    stack = EmbeddedStack(
        data_dir, nats_port=args.nats_port, redis_port=args.redis_port,
        nats_config=bundle.server_config if bundle else None, fresh=args.fresh,
        nats_nodes=args.cluster, hubs=args.hubs if args.hubs > 1 else 0, hub_env=hub_env, **_durability(args),
    )
    try:
        await asyncio.to_thread(stack.start)
    except StackError as exc:
        print(f"recall up: {exc}", file=sys.stderr)
        return 1
    try:
        settings = HubSettings(
            nats_url=stack.nats_url, falkordb_url=stack.redis_url, redis_url=stack.redis_url,
            nats_creds=str(bundle.hub_creds) if bundle else None, auth_required=bundle is not None,
            stream_replicas=stack.stream_replicas, metrics_port=args.metrics_port,
        )
        stop = _stop_event()
        async with _hub_in_this_process(settings, stack) as service:
            supervisor = asyncio.create_task(Supervisor(stack, report=_say).run(), name="recall-supervisor")
            print(f"Nexus Recall is up (data in {data_dir})")
            if earlier:
                print("  data      kept from earlier runs: searches find their beads too "
                      "(start empty: recall up --fresh, or make demo FRESH=1)")
            elif args.fresh:
                print("  data      started empty (--fresh; credentials in auth/ kept)")
            nodes = f"{stack.nats_nodes} nodes, one JetStream cluster, streams on {stack.stream_replicas}" \
                if stack.nats_nodes > 1 else "JetStream on"
            print(f"  NATS      {stack.nats_url}   ({nodes})")
            print(f"  FalkorDB  {stack.redis_url}  (redis-server 8 + FalkorDB, AOF on)")
            print(f"  durable   Redis appendfsync {stack.redis_appendfsync}, JetStream sync {stack.jetstream_sync}"
                  "  (docs/operations.md)")
            hubs = f"{stack.hubs} hub processes in one queue group" if stack.hubs else "hub"
            if bundle is None:
                print(f"  hub       {hubs} serving recall.v1.req.<ai_id>.<op>  (dev mode: no NATS auth)")
            else:
                from recall_hub.tooling.auth import bootstrap_groups

                print(f"  hub       {hubs} serving recall.v1.req.<ai_id>.<op>  (NATS auth ON: JWT credentials)")
                print(f"  creds     {auth_dir / 'creds'}/<id>.creds  ({len(bundle.creds)} identities)")
                try:
                    created = await bootstrap_groups(roster, stack.nats_url, auth_dir)
                    print(f"  groups    {', '.join(created) or 'none new'} (from {roster.name})")
                except AuthError as exc:
                    print(f"  groups    NOT bootstrapped: {exc}", file=sys.stderr)
            for url in ([service.metrics_url] if service is not None else _hub_status_urls(stack)):
                print(f"  metrics   {url}/metrics  (/healthz, /readyz)")
            print(f"  status    recall status --data-dir {data_dir}")
            if args.demo:
                await _tours(stack.nats_url, auth_dir if bundle else None, roster if bundle else None)
            print("\nCtrl-C stops everything.", flush=True)
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({supervisor, stopping}, return_when=asyncio.FIRST_COMPLETED)
            for task in (supervisor, stopping):
                task.cancel()
            failed = supervisor.done() and not supervisor.cancelled() and supervisor.exception() is None
            if failed:
                print(f"recall up: {supervisor.result()}; stopping everything", file=sys.stderr, flush=True)
    finally:
        await asyncio.to_thread(stack.stop)
        print("stopped.")
    return 1 if failed else 0


async def _status(args: argparse.Namespace) -> int:
    from recall_hub.store.beads import BeadStore
    from recall_hub.store.graph import GraphStore

    data_dir = _data_dir(args)
    state = running_state(data_dir)
    if state is None:
        kept = "holds data of earlier runs" if holds_data(data_dir) else "holds no data"
        print(f"Nexus Recall is not running on {data_dir} (it {kept}); start it with: recall up --data-dir {data_dir}")
        return 3
    print(f"Nexus Recall is running (recall up pid {state['pid']}, data in {data_dir})")
    print(f"  {'process':<14} {'pid':>8} {'port':>6}  state")
    for child in state["children"]:
        alive = "running" if child["pid"] and process_alive(child["pid"]) else "DOWN"
        print(f"  {child['name']:<14} {child['pid'] or '-':>8} {child['port'] or '-':>6}  {alive}")
    print(f"  NATS      {state['nats_url']}")
    print(f"  FalkorDB  {state['redis_url']}")
    graph = GraphStore(state["redis_url"], args.graph or HubSettings().graph_name)
    try:
        print(f"  beads     {await BeadStore(graph).system_count():,} in graph {graph.graph_name}")
    except Exception as exc:  # the state is still worth showing when the store does not answer
        print(f"  beads     unknown: {exc}")
    finally:
        await graph.aclose()
    return 0


def _say(message: str) -> None:
    print(f"  {message}", flush=True)


def _hub_in_this_process(
    settings: HubSettings, stack: EmbeddedStack
) -> AbstractAsyncContextManager[HubService | None]:
    """The hub of a stack without hub processes of its own runs in this process."""
    from recall_hub.service.server import running_hub

    return running_hub(settings) if stack.hubs == 0 else contextlib.nullcontext()


def _hub_status_urls(stack: EmbeddedStack) -> list[str]:
    return [f"http://{stack.host}:{c.port}" for c in stack.children if c.name.startswith("hub-")]


def _durability(args: argparse.Namespace) -> Durability:
    """The stack's fsync settings: the ``--durability`` preset, then the explicit flags."""
    chosen = DURABILITY[args.durability].copy()
    if getattr(args, "appendfsync", None):
        chosen["redis_appendfsync"] = args.appendfsync
    if getattr(args, "jetstream_sync", None):
        chosen["jetstream_sync"] = args.jetstream_sync
    return chosen


def _auth_init(args: argparse.Namespace) -> int:
    from recall_hub.tooling.auth import AuthError, generate

    try:
        bundle = generate(Path(args.roster), Path(args.out).expanduser(), rotate=args.rotate)
    except AuthError as exc:
        print(f"recall auth init: {exc}", file=sys.stderr)
        return 1
    print(f"server config      {bundle.server_config}   (public: operator + account JWTs)")
    print(f"hub                {bundle.hub_creds}")
    for identity, path in bundle.creds.items():
        print(f"{identity:<18} {path}")
    if bundle.revoked:
        print(f"revoked            {', '.join(bundle.revoked)}  (reload or restart nats-server to apply)")
    return 0


def _bootstrap_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    auth_dir = Path(args.dir).expanduser()
    return (Path(args.roster) if args.roster else auth_dir / "roster.yaml"), auth_dir


async def _auth_bootstrap(args: argparse.Namespace) -> int:
    from recall_hub.tooling.auth import AuthError, bootstrap_groups

    roster, auth_dir = _bootstrap_paths(args)
    try:
        created = await bootstrap_groups(roster, args.nats, auth_dir)
    except AuthError as exc:
        print(f"recall auth bootstrap: {exc}", file=sys.stderr)
        return 1
    print(f"created {', '.join(created)}" if created else "every roster group already exists; members ensured")
    return 0


async def _hub(args: argparse.Namespace) -> int:
    from recall_hub.service.server import serve_forever

    settings = HubSettings(**_url_overrides(args))  # type: ignore[arg-type]
    if "metrics_port" not in settings.model_fields_set:  # `recall hub` serves /metrics unless told otherwise
        settings = settings.model_copy(update={"metrics_port": _default_metrics_port(settings.metrics_host)})
    if settings.tracing:
        from recall_hub.service.tracing import install_provider

        install_provider()
    await serve_forever(settings, _stop_event())
    return 0


DEFAULT_METRICS_PORT = 9464


def _default_metrics_port(host: str) -> int:
    """9464, or any free port when another process (a second hub on this machine) has it."""
    import socket

    with socket.socket() as probe:
        try:
            probe.bind((host, DEFAULT_METRICS_PORT))
        except OSError:
            log.warning("metrics port %d is taken: serving /metrics on a free port (RECALL_METRICS_PORT sets one)",
                        DEFAULT_METRICS_PORT)
            return 0
    return DEFAULT_METRICS_PORT


async def _demo(args: argparse.Namespace) -> int:
    auth_dir = Path(args.auth_dir).expanduser() if args.auth_dir else None
    roster = (Path(args.roster) if args.roster else auth_dir / "roster.yaml") if auth_dir else None
    return 0 if await _tours(args.nats, auth_dir, roster) else 1


async def _bench(args: argparse.Namespace) -> int:
    if args.suite == "vectors":
        return await _bench_vectors(args)
    if args.suite == "embedder":
        return await _bench_embedder(args)
    if args.suite == "failover":
        return await _bench_failover(args)
    if args.suite == "flood":
        from recall_hub.bench.flood import FloodConfig, render_flood, run_flood

        flood = await run_flood(FloodConfig(runs=args.runs, embedder=args.embedder or "hash"))
        print(render_flood(flood))
        _keep(args, "flood", flood)
        return 0 if flood.met else 1
    if args.suite == "load":
        from recall_hub.bench.load import LoadConfig, render_load, run_load

        load = await run_load(
            LoadConfig(agents=_ints(args.agents), hubs=_ints(args.hubs), seconds=args.seconds, rate=args.rate,
                       embedder=args.embedder or "local", create_settle=args.create_settle, seed=args.seed),
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
        print(render_load(load))
        _keep(args, "load", load)
        return 0
    if args.suite == "growth":
        from recall_hub.bench.growth import render_growth, run_growth

        growth = await run_growth(
            list(_ints(args.sizes)), runs=args.samples if args.samples != 1000 else 200, vector_max=args.vector_max,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
        print(render_growth(growth))
        _keep(args, "growth", growth)
        return 0
    if args.suite == "keyword":
        from recall_hub.bench.keyword import render_keyword_study, run_keyword_study

        sizes = [10_000, args.beads] if args.beads > 10_000 else [args.beads]
        rows = await run_keyword_study(sizes)
        print(render_keyword_study(rows))
        _keep(args, "keyword", {"rows": rows})
        return 0
    from recall_hub.bench.run import BenchConfig, render, run_bench, to_json

    config = BenchConfig(
        beads=args.beads, samples=args.samples, concurrency=args.concurrency, durability=args.durability,
        embedder=args.embedder, create_settle=args.create_settle, seed=args.seed,
    )
    report = await run_bench(config)
    figures = to_json(report)
    print(json.dumps(figures, indent=2, default=str) if args.json else render(report))
    _keep(args, "bench", figures)
    return 0


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def _keep(args: argparse.Namespace, suite: str, report: Any) -> None:
    """The run's results file (unless ``--no-save``): its figures (the report, dataclasses as dicts) with the
    command, commit, machine and date."""
    if args.no_save:
        return
    from recall_hub.bench.records import as_figures, new_record, save

    print(f"results: {save(new_record(suite, as_figures(report)), Path(args.results_dir))}", file=sys.stderr)


async def _bench_failover(args: argparse.Namespace) -> int:
    from recall_hub.bench.failover import FailoverConfig, render, run_failover

    report = await run_failover(
        FailoverConfig(phase_s=args.phase_seconds, embedder=args.embedder or "hash"),
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(render(report))
    _keep(args, "failover", report)
    return 0 if report.ok else 1


async def _bench_vectors(args: argparse.Namespace) -> int:
    import tempfile

    from recall_hub.bench.vectors import render_study, run_vector_study

    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp)) as stack:
        study = await run_vector_study(stack.redis_url, Path(args.data))
    print(render_study(study))
    _keep(args, "vectors", study)
    return 0


async def _bench_embedder(args: argparse.Namespace) -> int:
    from recall_hub.bench.vectors import corpus
    from recall_hub.embedders import EmbedderConfig, make_embedder
    from recall_hub.embedders.throughput import measure

    texts = corpus(Path(args.data))[0][:200]
    embedder = make_embedder(EmbedderConfig(kind=args.embedder or "local"))
    try:
        result = await measure(embedder, texts, batch_size=32)
    finally:
        await embedder.aclose()
    print(f"{result.model_id}: {result.n} LoCoMo texts; one per call {result.single_per_s:.0f}/s "
          f"(p50 {result.single_p50_ms:.1f} ms, p99 {result.single_p99_ms:.1f} ms); "
          f"batches of {result.batch_size} {result.batched_per_s:.0f}/s")
    _keep(args, "embedder", result)
    return 0


async def _import(args: argparse.Namespace) -> int:
    from recall_client import RecallClient

    from recall_hub.tooling.importer import import_file, progress_bar

    async with RecallClient(args.ai, args.nats, creds=args.creds, timeout=args.timeout) as client:
        report = await import_file(client, Path(args.file), batch_size=args.batch, progress=progress_bar())
    rate = (report.created + report.replayed) / max(report.seconds, 1e-9)
    print(f"\n{report.lines} line(s): {report.created} bead(s) created, {report.replayed} already there "
          f"(same idempotency key), {len(report.refused)} refused; {report.seconds:.1f} s, {rate:.0f} beads/s")
    for number, reason in report.refused[:20]:
        print(f"  line {number}: {reason}")
    if len(report.refused) > 20:
        print(f"  … and {len(report.refused) - 20} more")
    return 1 if report.refused else 0


async def _upgrade(args: argparse.Namespace) -> int:
    from redis.asyncio import Redis

    from recall_hub.store.keys import Keys
    from recall_hub.store.upgrade import adopt_legacy_keys

    settings = HubSettings(**_url_overrides(args))  # type: ignore[arg-type]
    redis = Redis.from_url(settings.redis_url)
    try:
        done = await adopt_legacy_keys(redis, Keys(settings.graph_name), settings.applied_event_ttl_s)
    finally:
        await redis.aclose()
    print(f"graph {settings.graph_name}: {done.keys} key(s) moved under its namespace, "
          f"{done.applied_events} applied event id(s) carried over, {done.conflicts} left in place (name taken)")
    return 1 if done.conflicts else 0


async def _reindex(args: argparse.Namespace) -> int:
    from recall_hub.context import HubContext
    from recall_hub.ops.indexing import reindex

    settings = HubSettings(**_url_overrides(args))  # type: ignore[arg-type]
    ctx = await HubContext.connect(settings)
    print(f"re-embedding every bead with {ctx.embedder.model_id}", file=sys.stderr)

    def progress(done: int, total: int) -> None:
        width = 40
        filled = width * done // max(total, 1)
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end="", file=sys.stderr, flush=True)

    try:
        count = await reindex(ctx, progress=progress)
    finally:
        await ctx.aclose()
    print(f"\nreindexed {count} bead(s)", file=sys.stderr)
    return 0


async def _backup(args: argparse.Namespace) -> int:
    from recall_hub.tooling.backup import backup, stage_progress_bar

    settings = HubSettings(**_url_overrides(args))  # type: ignore[arg-type]
    report = await backup(settings, Path(args.out), progress=stage_progress_bar())
    counts = report.header.counts
    print(f"\nbacked up graph {settings.graph_name} to {report.path}: {sum(counts.nodes.values())} node(s), "
          f"{sum(counts.edges.values())} edge(s), {sum(counts.keys.values())} key(s), {report.bytes} bytes; "
          f"{report.seconds:.1f} s (the point-in-time transaction: {report.transaction_ms:.0f} ms)", file=sys.stderr)
    return 0


async def _restore(args: argparse.Namespace) -> int:
    from recall_hub.tooling.backup import TargetNotEmpty, restore, stage_progress_bar
    from recall_hub.tooling.backup_file import BackupFileError

    settings = HubSettings(**_url_overrides(args))  # type: ignore[arg-type]
    try:
        report = await restore(
            settings, Path(args.file), force=args.force, progress=stage_progress_bar(),
            forget_ledger=Path(args.forget_ledger) if args.forget_ledger else None,
        )
    except (BackupFileError, TargetNotEmpty) as exc:
        print(f"recall restore: {exc}; nothing was changed", file=sys.stderr)
        return 1
    print(f"\nrestored {report.header.graph} (backed up {report.header.created_at:%Y-%m-%d %H:%M:%S} UTC) into graph "
          f"{settings.graph_name}: {report.nodes} node(s), {report.edges} edge(s), {report.keys} key(s); "
          f"{report.embedded} bead(s) embedded with {report.model_id}; {report.seconds:.1f} s", file=sys.stderr)
    return 0


def _url_overrides(args: argparse.Namespace) -> dict[str, str]:
    values = {
        "nats_url": getattr(args, "nats", None),
        "falkordb_url": getattr(args, "falkordb", None),
        "redis_url": getattr(args, "redis", None),
        "graph_name": getattr(args, "graph", None),
        "nats_creds": getattr(args, "creds", None),
    }
    return {k: v for k, v in values.items() if v is not None}


def _add_url_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nats", help="NATS URL (RECALL_NATS_URL)")
    parser.add_argument("--falkordb", help="FalkorDB URL (RECALL_FALKORDB_URL)")
    parser.add_argument("--redis", help="Redis 8 URL (RECALL_REDIS_URL)")
    parser.add_argument("--graph", help="graph name (RECALL_GRAPH_NAME)")
    parser.add_argument("--creds", help="NATS credentials file (RECALL_NATS_CREDS)")


async def _audit(args: argparse.Namespace) -> int:
    from redis.asyncio import Redis

    from recall_hub.store.audit import AuditLog
    from recall_hub.store.keys import Keys

    settings = HubSettings(**_url_overrides(args))  # type: ignore[arg-type]
    redis = Redis.from_url(settings.redis_url)
    try:
        audit = AuditLog(redis, Keys(settings.graph_name))
        entries = await audit.entries(ai_id=args.ai, bead_id=args.bead, limit=args.limit)
    finally:
        await redis.aclose()
    print(f"{'when (UTC)':<24} {'who':<20} {'operation':<22} {'outcome':<10} beads")
    for e in entries:
        outcome = "allowed" if e.allowed else e.code
        print(f"{e.at:%Y-%m-%d %H:%M:%S.%f}"[:23].ljust(24) + f" {e.ai_id:<20} {e.op:<22} {outcome:<10} "
              + ", ".join(e.bead_ids))
    return 0


async def _console(args: argparse.Namespace) -> int:
    import uvicorn

    from recall_hub.console import create_app

    nats_url = args.nats or os.environ.get("RECALL_NATS_URL", "nats://127.0.0.1:4222")
    creds = args.creds or args.creds_dir
    try:
        app = create_app(nats_url, creds_dir=creds, dev=creds is None,
                         secret=os.environ.get("RECALL_CONSOLE_SECRET"))
    except ValueError as exc:
        print(f"recall console: {exc}", file=sys.stderr)
        return 2
    mode = f"as the identities of {creds}" if creds else "in development mode (any AI id; NATS without auth)"
    print(f"Recall console on http://{args.host}:{args.port}/ — hub at {nats_url}, {mode}", file=sys.stderr)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="info", lifespan="on"))
    await server.serve()
    return 0


async def _eval_locomo(args: argparse.Namespace) -> int:
    from recall_hub.bench.locomo import MODES, markdown, render, run_locomo

    report = await run_locomo(
        Path(args.data),
        nats_url=args.nats,
        conversations=args.conversations,
        modes=args.modes.split(",") if args.modes else MODES,
        progress=_progress,
        plain=args.plain,
    )
    print(file=sys.stderr)
    print(json.dumps(report.to_json(), indent=2) if args.json else render(report))
    _keep(args, "locomo", report.to_json())
    if args.markdown:
        Path(args.markdown).write_text(markdown(report))
        print(f"wrote {args.markdown}", file=sys.stderr)
    return 0


def _progress(stage: str, done: int, total: int) -> None:
    print(f"\r{stage}: {done}/{total}", end="", file=sys.stderr, flush=True)


async def _eval_longmemeval(args: argparse.Namespace) -> int:
    from recall_hub.bench.longmemeval import MODES, render, run_longmemeval

    report = await run_longmemeval(
        Path(args.data),
        nats_url=args.nats,
        questions=args.questions,
        types=args.types.split(",") if args.types else (),
        modes=args.modes.split(",") if args.modes else MODES,
        progress=_progress,
    )
    print(file=sys.stderr)
    print(json.dumps(report.to_json(), indent=2) if args.json else render(report))
    _keep(args, "longmemeval", report.to_json())
    return 0


def _export(args: argparse.Namespace) -> int:
    from recall_schemas.export import export, sync_protocol_doc

    for path in export(Path(args.out)):
        print(path)
    doc = Path(args.out).parent / "docs" / "protocol.md"
    if doc.exists() and sync_protocol_doc(doc):
        print(doc)
    return 0


def _results_file_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results-dir", default="benchmarks/results",
                        help="where the run's results file (JSON) goes (default: %(default)s)")
    parser.add_argument("--no-save", action="store_true", help="write no results file")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="recall", description="Nexus Recall: shared memory for AI agent groups")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--log-format", choices=LOG_FORMATS, help="text or json lines (RECALL_LOG_FORMAT; text)")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start nats-server, redis+FalkorDB and the hub on this machine")
    up.add_argument("--data-dir", default=str(default_data_dir()))
    up.add_argument("--nats-port", type=int, default=4222)
    up.add_argument("--redis-port", type=int, default=6379)
    up.add_argument("--demo", action="store_true", help="run the demo once the stack is up")
    up.add_argument("--cluster", type=int, default=1, metavar="N",
                    help="nats-server processes forming one JetStream cluster on --nats-port and the next ports "
                    "(streams replicated on 3 when N >= 3)")
    up.add_argument("--metrics-port", type=int, default=0,
                    help="the in-process hub's /metrics, /healthz, /readyz port (default: a free one, printed)")
    up.add_argument("--hubs", type=int, default=1, metavar="N",
                    help="hub processes: 1 runs inside `recall up`; more run as their own processes in one queue group")
    up.add_argument("--fresh", action="store_true",
                    help="start empty: delete the data of earlier runs in --data-dir first (credentials are kept)")
    up.add_argument("--secure", action="store_true",
                    help="NATS auth on: run nats-server with the `recall auth init` config, the hub with its creds")
    up.add_argument("--auth-dir", help="where `recall auth init` wrote (default <data-dir>/auth)")
    up.add_argument("--roster", help="roster to (re)generate from (default <auth-dir>/roster.yaml)")
    up.add_argument("--durability", choices=tuple(DURABILITY), default="default",
                    help="default: Redis fsyncs the AOF every second, JetStream every 2 min; "
                    "strict: both fsync before acknowledging (docs/operations.md)")
    up.add_argument("--appendfsync", choices=APPENDFSYNC, help="Redis AOF fsync policy (overrides --durability)")
    up.add_argument("--jetstream-sync", help="JetStream sync_interval: always, or a duration like 1s, 2m")
    up.set_defaults(run=_up)

    status = sub.add_parser("status", help="what the embedded stack on a data dir runs: processes, ports, beads")
    status.add_argument("--data-dir", default=str(default_data_dir()))
    status.add_argument("--graph", help="graph name (RECALL_GRAPH_NAME)")
    status.set_defaults(run=_status)

    auth = sub.add_parser("auth", help="NATS security: server config and per-identity credentials")
    auth_sub = auth.add_subparsers(dest="auth_command", required=True)
    init = auth_sub.add_parser("init", help="generate nats-server.conf and creds/<id>.creds from a roster")
    init.add_argument("--roster", required=True, help="roster.yaml: ops, agents, services, groups")
    init.add_argument("--out", default=str(default_data_dir() / "auth"), help="output directory")
    init.add_argument("--rotate", action="store_true", help="new keys for every identity; revoke the old ones")
    init.set_defaults(run=_auth_init, sync=True)
    boot = auth_sub.add_parser("bootstrap", help="create the roster's groups through a running hub, as their ops")
    boot.add_argument("--dir", default=str(default_data_dir() / "auth"), help="the `auth init` output directory")
    boot.add_argument("--roster", help="default <dir>/roster.yaml")
    boot.add_argument("--nats", default="nats://127.0.0.1:4222")
    boot.set_defaults(run=_auth_bootstrap)

    hub = sub.add_parser("hub", help="run only the hub against external servers (or RECALL_* variables)")
    _add_url_options(hub)
    hub.set_defaults(run=_hub)

    reindex = sub.add_parser("reindex", help="re-embed every bead with the configured embedder (RECALL_EMBEDDER__*)")
    _add_url_options(reindex)
    reindex.set_defaults(run=_reindex)

    backup = sub.add_parser("backup", help="write the graph and its source data, as of one instant, to a file")
    backup.add_argument("--out", required=True, help="the backup file to write (gzip JSON lines)")
    _add_url_options(backup)
    backup.set_defaults(run=_backup)

    restore = sub.add_parser(
        "restore", help="restore a backup into an empty graph and rebuild its indexes (RECALL_EMBEDDER__*)"
    )
    restore.add_argument("file", help="a file `recall backup` wrote")
    restore.add_argument("--force", action="store_true", help="replace whatever the target graph holds")
    restore.add_argument(
        "--forget-ledger", metavar="BACKUP",
        help="a newer backup file whose forgotten beads stay forgotten (its tombstones are applied too)",
    )
    _add_url_options(restore)
    restore.set_defaults(run=_restore)

    imp = sub.add_parser("import", help="store the beads of a JSON-lines file (one create_bead object a line)")
    imp.add_argument("file", help="JSON lines: {\"title\": …, \"content\": …, \"tags\": […], …}")
    imp.add_argument("--ai", required=True, help="the identity that creates the beads")
    imp.add_argument("--nats", default="nats://127.0.0.1:4222")
    imp.add_argument("--creds", help="that identity's NATS credentials file (secure stacks)")
    imp.add_argument("--batch", type=int, default=64, help="beads per create_beads request")
    imp.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for one batch's reply")
    imp.set_defaults(run=_import)

    add_collect_commands(sub)

    upgrade = sub.add_parser(
        "upgrade", help="move a first-release store's Redis keys under the graph's namespace (safe to rerun)"
    )
    _add_url_options(upgrade)
    upgrade.set_defaults(run=_upgrade)

    demo = sub.add_parser("demo", help="run the scripted demo against a running hub")
    demo.add_argument("--nats", default="nats://127.0.0.1:4222")
    demo.add_argument("--auth-dir", help="connect with the credentials `recall auth init` wrote there")
    demo.add_argument("--roster", help="default <auth-dir>/roster.yaml")
    demo.set_defaults(run=_demo)

    bench = sub.add_parser("bench", help="latency and throughput through the bus, with the NATS floor")
    bench.add_argument("--beads", type=int, default=10_000)
    bench.add_argument("--samples", type=int, default=1000)
    bench.add_argument("--concurrency", type=int, default=32)
    bench.add_argument("--seed", type=int, default=7,
                       help="bus and load: the memory, the queries and the agents' requests are the same for a seed")
    bench.add_argument(
        "--suite", choices=("bus", "vectors", "embedder", "keyword", "failover", "growth", "flood", "load"),
        default="bus",
        help="bus: operations through NATS (default); vectors: vector-set parameters; embedder: texts/s; "
        "keyword: the keyword index alone at 10k and --beads; failover: a NATS node and a hub killed under load; "
        "growth: one graph's memory and query times at --sizes beads; flood: one identity's burst of large "
        "writes against another's reads; load: many agents at once, closed and open loop, one and two hubs",
    )
    bench.add_argument("--agents", default="8,32,128", help="load: agent counts, one level each (comma-separated)")
    bench.add_argument("--hubs", default="1,2", help="load: hub processes, a stack each (comma-separated)")
    bench.add_argument("--seconds", type=float, default=15.0, help="load: timed length of each level")
    bench.add_argument("--rate", type=float, default=400.0, help="load: open-loop requests/s (0: closed loop only)")
    bench.add_argument("--runs", type=int, default=3, help="flood: runs, each on a fresh stack (median reported)")
    bench.add_argument("--sizes", default="10000,100000,1000000",
                       help="growth: bead counts the graph is measured at (comma-separated)")
    bench.add_argument("--vector-max", type=int, default=100_000,
                       help="growth: the largest size at which the vector set is measured too")
    bench.add_argument("--phase-seconds", type=float, default=10.0,
                       help="failover: length of each phase (before, fault, after)")
    bench.add_argument("--data", default="../shared/data/locomo", help="LoCoMo folder (vectors, embedder suites)")
    bench.add_argument("--durability", choices=tuple(DURABILITY), default="default",
                       help="fsync settings of the stack the bus suite starts (strict: fsync before every ack)")
    bench.add_argument("--embedder", choices=("local", "e5-small", "hash", "openai"),
                       help="the in-process hub's embedder (default: RECALL_EMBEDDER__KIND, else local)")
    bench.add_argument("--json", action="store_true", help="print the figures as JSON instead of tables")
    bench.add_argument("--create-settle", choices=("inline", "background"), default="background",
                       help="the hubs' RECALL_CREATE_SETTLE (bus: the in-process hub; load: the hub processes)")
    _results_file_options(bench)
    bench.set_defaults(run=_bench)

    evals = sub.add_parser("eval", help="retrieval quality benchmarks")
    eval_sub = evals.add_subparsers(dest="eval_command", required=True)
    locomo = eval_sub.add_parser("locomo", help="LoCoMo: Recall@10, Hit@5, MRR, session Hit@1 per mode and category")
    locomo.add_argument("--data", default="../shared/data/locomo",
                        help="LoCoMo conversations: a folder of JSON files or one file (the release's locomo10.json)")
    locomo.add_argument("--conversations", type=int, help="only the first N conversations (default: all)")
    locomo.add_argument("--modes", help="comma-separated subset of: keyword,vector,hybrid-rrf,hybrid,hybrid+priors")
    locomo.add_argument("--nats", help="use a hub already serving there (default: a private embedded stack)")
    locomo.add_argument("--markdown", help="also write the report as markdown to this file")
    locomo.add_argument("--plain", action="store_true",
                        help="ingest as a plain client: no reply-structure edges, only what the hub links itself")
    locomo.add_argument("--json", action="store_true", help="print the figures as JSON instead of tables")
    _results_file_options(locomo)
    locomo.set_defaults(run=_eval_locomo)

    lme = eval_sub.add_parser(
        "longmemeval", help="LongMemEval_S: session recall_any@1/@5/@10, recall_all@5, turn Recall@10 per mode and type"
    )
    lme.add_argument("--data", default="../shared/data/longmemeval",
                     help="LongMemEval questions: a folder of JSON files or one file (longmemeval_s.json)")
    lme.add_argument("--questions", type=int, help="a stratified subset: this many, taking each question type in turn")
    lme.add_argument("--types", help="comma-separated question types (default: all)")
    lme.add_argument("--modes", help="comma-separated subset of: keyword,vector,hybrid,hybrid+priors")
    lme.add_argument("--nats", help="use a hub already serving there (default: a private embedded stack)")
    lme.add_argument("--json", action="store_true", help="print the figures as JSON instead of tables")
    _results_file_options(lme)
    lme.set_defaults(run=_eval_longmemeval)

    audit = sub.add_parser("audit", help="who read and wrote what (by AI id or by bead)")
    target = audit.add_mutually_exclusive_group(required=True)
    target.add_argument("--ai", help="an AI id")
    target.add_argument("--bead", help="a bead id")
    audit.add_argument("--limit", type=int, default=100)
    audit.add_argument("--redis", help="Redis URL (RECALL_REDIS_URL)")
    audit.add_argument("--graph", help="graph name (RECALL_GRAPH_NAME)")
    audit.set_defaults(run=_audit)

    console = sub.add_parser("console", help="a web console acting as one hub identity per browser session")
    console.add_argument("--nats", help="NATS URL (RECALL_NATS_URL, default nats://127.0.0.1:4222)")
    console.add_argument("--host", default="127.0.0.1")
    console.add_argument("--port", type=int, default=8800)
    who = console.add_mutually_exclusive_group()
    who.add_argument("--creds", help="one identity's NATS credentials file: the console is that identity")
    who.add_argument("--creds-dir", help="a directory of <ai id>.creds files: the login page lists those ids")
    who.add_argument("--dev", action="store_true", help="NATS without auth: sign in as any AI id (the default)")
    console.set_defaults(run=_console)

    exp = sub.add_parser("export-schemas", help="write JSON Schema and AsyncAPI files")
    exp.add_argument("--out", default="schemas")
    exp.set_defaults(run=_export, sync=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        log_format = args.log_format or format_from_env()
    except ValueError as exc:
        print(f"recall: {exc}", file=sys.stderr)
        return 2
    configure_logging(logging.DEBUG if args.verbose else logging.INFO, log_format)
    if getattr(args, "results_dir", None) is not None and not args.no_save:
        from recall_hub.bench.machine import commit

        commit()  # the code this run loads, before anyone commits more (a results file names it)
    from recall_hub.bench.evalkit import DatasetError

    try:
        if getattr(args, "sync", False):
            return int(args.run(args))
        return int(asyncio.run(args.run(args)))
    except DatasetError as exc:
        print(f"recall: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
