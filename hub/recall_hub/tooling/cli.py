"""`recall`: run the embedded stack, the hub, the demo, the benchmark and the schema export."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from recall_hub.config import HubSettings
from recall_hub.tooling.stack import (
    APPENDFSYNC,
    DURABILITY,
    Durability,
    EmbeddedStack,
    StackError,
    default_data_dir,
    holds_data,
)

if TYPE_CHECKING:
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
    from recall_hub.service.server import running_hub
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
    stack = EmbeddedStack(
        data_dir, nats_port=args.nats_port, redis_port=args.redis_port,
        nats_config=bundle.server_config if bundle else None, fresh=args.fresh, **_durability(args),
    )
    try:
        stack.start()
    except StackError as exc:
        print(f"recall up: {exc}", file=sys.stderr)
        return 1
    try:
        settings = HubSettings(
            nats_url=stack.nats_url, falkordb_url=stack.redis_url, redis_url=stack.redis_url,
            nats_creds=str(bundle.hub_creds) if bundle else None, auth_required=bundle is not None,
        )
        stop = _stop_event()
        async with running_hub(settings):
            print(f"Nexus Recall is up (data in {data_dir})")
            if earlier:
                print("  data      kept from earlier runs: searches find their beads too "
                      "(start empty: recall up --fresh, or make demo FRESH=1)")
            elif args.fresh:
                print("  data      started empty (--fresh; credentials in auth/ kept)")
            print(f"  NATS      {stack.nats_url}   (JetStream on)")
            print(f"  FalkorDB  {stack.redis_url}  (redis-server 8 + FalkorDB, AOF on)")
            print(f"  durable   Redis appendfsync {stack.redis_appendfsync}, JetStream sync {stack.jetstream_sync}"
                  "  (docs/operations.md)")
            if bundle is None:
                print("  hub       serving recall.v1.req.<ai_id>.<op>  (dev mode: no NATS auth)")
            else:
                from recall_hub.tooling.auth import bootstrap_groups

                print("  hub       serving recall.v1.req.<ai_id>.<op>  (NATS auth ON: JWT credentials)")
                print(f"  creds     {auth_dir / 'creds'}/<id>.creds  ({len(bundle.creds)} identities)")
                try:
                    created = await bootstrap_groups(roster, stack.nats_url, auth_dir)
                    print(f"  groups    {', '.join(created) or 'none new'} (from {roster.name})")
                except AuthError as exc:
                    print(f"  groups    NOT bootstrapped: {exc}", file=sys.stderr)
            if args.demo:
                await _tours(stack.nats_url, auth_dir if bundle else None, roster if bundle else None)
            print("\nCtrl-C stops everything.", flush=True)
            await stop.wait()
    finally:
        stack.stop()
        print("stopped.")
    return 0


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
    await serve_forever(settings, _stop_event())
    return 0


async def _demo(args: argparse.Namespace) -> int:
    auth_dir = Path(args.auth_dir).expanduser() if args.auth_dir else None
    roster = (Path(args.roster) if args.roster else auth_dir / "roster.yaml") if auth_dir else None
    return 0 if await _tours(args.nats, auth_dir, roster) else 1


async def _bench(args: argparse.Namespace) -> int:
    if args.suite == "vectors":
        return await _bench_vectors(args)
    if args.suite == "embedder":
        return await _bench_embedder(args)
    if args.suite == "keyword":
        from recall_hub.bench.keyword import render_keyword_study, run_keyword_study

        sizes = [10_000, args.beads] if args.beads > 10_000 else [args.beads]
        print(render_keyword_study(await run_keyword_study(sizes)))
        return 0
    from recall_hub.bench.run import BenchConfig, render, run_bench

    config = BenchConfig(
        beads=args.beads, samples=args.samples, concurrency=args.concurrency, durability=args.durability,
        embedder=args.embedder, create_settle=args.create_settle,
    )
    report = await run_bench(config)
    if args.json:
        import json

        from recall_hub.bench.run import to_json

        print(json.dumps(to_json(report), indent=2, default=str))
    else:
        print(render(report))
    return 0


async def _bench_vectors(args: argparse.Namespace) -> int:
    import tempfile

    from recall_hub.bench.vectors import render_study, run_vector_study

    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp)) as stack:
        study = await run_vector_study(stack.redis_url, Path(args.data))
    print(render_study(study))
    return 0


async def _bench_embedder(args: argparse.Namespace) -> int:
    from recall_hub.bench.vectors import corpus
    from recall_hub.embedders import EmbedderConfig, make_embedder
    from recall_hub.embedders.throughput import measure

    texts = corpus(Path(args.data))[0][:200]
    embedder = make_embedder(EmbedderConfig())
    try:
        result = await measure(embedder, texts, batch_size=32)
    finally:
        await embedder.aclose()
    print(f"{result.model_id}: {result.n} LoCoMo texts; one per call {result.single_per_s:.0f}/s "
          f"(p50 {result.single_p50_ms:.1f} ms, p99 {result.single_p99_ms:.1f} ms); "
          f"batches of {result.batch_size} {result.batched_per_s:.0f}/s")
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


async def _eval_locomo(args: argparse.Namespace) -> int:
    from recall_hub.bench.locomo import MODES, markdown, render, run_locomo

    def progress(stage: str, done: int, total: int) -> None:
        print(f"\r{stage}: {done}/{total}", end="", file=sys.stderr, flush=True)

    report = await run_locomo(
        Path(args.data),
        nats_url=args.nats,
        conversations=args.conversations,
        modes=args.modes.split(",") if args.modes else MODES,
        progress=progress,
        plain=args.plain,
    )
    print(file=sys.stderr)
    print(render(report))
    if args.markdown:
        Path(args.markdown).write_text(markdown(report))
        print(f"wrote {args.markdown}", file=sys.stderr)
    return 0


def _export(args: argparse.Namespace) -> int:
    from recall_schemas.export import export, sync_protocol_doc

    for path in export(Path(args.out)):
        print(path)
    doc = Path(args.out).parent / "docs" / "protocol.md"
    if doc.exists() and sync_protocol_doc(doc):
        print(doc)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="recall", description="Nexus Recall: shared memory for AI agent groups")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start nats-server, redis+FalkorDB and the hub on this machine")
    up.add_argument("--data-dir", default=str(default_data_dir()))
    up.add_argument("--nats-port", type=int, default=4222)
    up.add_argument("--redis-port", type=int, default=6379)
    up.add_argument("--demo", action="store_true", help="run the demo once the stack is up")
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

    imp = sub.add_parser("import", help="store the beads of a JSON-lines file (one create_bead object a line)")
    imp.add_argument("file", help="JSON lines: {\"title\": …, \"content\": …, \"tags\": […], …}")
    imp.add_argument("--ai", required=True, help="the identity that creates the beads")
    imp.add_argument("--nats", default="nats://127.0.0.1:4222")
    imp.add_argument("--creds", help="that identity's NATS credentials file (secure stacks)")
    imp.add_argument("--batch", type=int, default=64, help="beads per create_beads request")
    imp.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for one batch's reply")
    imp.set_defaults(run=_import)

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
    bench.add_argument(
        "--suite", choices=("bus", "vectors", "embedder", "keyword"), default="bus",
        help="bus: operations through NATS (default); vectors: vector-set parameters; embedder: texts/s; "
        "keyword: the keyword index alone at 10k and --beads",
    )
    bench.add_argument("--data", default="../shared/data/locomo", help="LoCoMo folder (vectors, embedder suites)")
    bench.add_argument("--durability", choices=tuple(DURABILITY), default="default",
                       help="fsync settings of the stack the bus suite starts (strict: fsync before every ack)")
    bench.add_argument("--embedder", choices=("local", "hash", "openai"),
                       help="the in-process hub's embedder (default: RECALL_EMBEDDER__KIND, else local)")
    bench.add_argument("--json", action="store_true", help="print the figures as JSON instead of tables")
    bench.add_argument("--create-settle", choices=("inline", "background"), default="inline",
                       help="the in-process hub's RECALL_CREATE_SETTLE")
    bench.set_defaults(run=_bench)

    evals = sub.add_parser("eval", help="retrieval quality benchmarks")
    eval_sub = evals.add_subparsers(dest="eval_command", required=True)
    locomo = eval_sub.add_parser("locomo", help="LoCoMo: Recall@10, Hit@5, MRR, session Hit@1 per mode and category")
    locomo.add_argument("--data", default="../shared/data/locomo", help="folder of LoCoMo conversation JSON files")
    locomo.add_argument("--conversations", type=int, default=5)
    locomo.add_argument("--modes", help="comma-separated subset of: keyword,vector,hybrid-rrf,hybrid,hybrid+priors")
    locomo.add_argument("--nats", help="use a hub already serving there (default: a private embedded stack)")
    locomo.add_argument("--markdown", help="also write the report as markdown to this file")
    locomo.add_argument("--plain", action="store_true",
                        help="ingest as a plain client: no reply-structure edges, only what the hub links itself")
    locomo.set_defaults(run=_eval_locomo)

    audit = sub.add_parser("audit", help="who read and wrote what (by AI id or by bead)")
    target = audit.add_mutually_exclusive_group(required=True)
    target.add_argument("--ai", help="an AI id")
    target.add_argument("--bead", help="a bead id")
    audit.add_argument("--limit", type=int, default=100)
    audit.add_argument("--redis", help="Redis URL (RECALL_REDIS_URL)")
    audit.add_argument("--graph", help="graph name (RECALL_GRAPH_NAME)")
    audit.set_defaults(run=_audit)

    exp = sub.add_parser("export-schemas", help="write JSON Schema and AsyncAPI files")
    exp.add_argument("--out", default="schemas")
    exp.set_defaults(run=_export, sync=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if getattr(args, "sync", False):
        return int(args.run(args))
    try:
        return int(asyncio.run(args.run(args)))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
