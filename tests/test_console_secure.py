"""The console on a secure bus: it signs in only as identities whose credentials it holds, and each
browser session reads the hub with that identity's NATS credentials, so the hub decides what it sees."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from recall_client import RecallClient
from recall_hub.console import create_app
from recall_hub.service.endpoints import HubService
from recall_hub.tooling.auth import AuthBundle, generate
from recall_hub.tooling.stack import EmbeddedStack

BASE = "http://console.test"
WRITER, READER, UNKNOWN = (f"a_{secrets.token_hex(5)}" for _ in range(3))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> AuthBundle:
    base = tmp_path_factory.mktemp("console-secure")
    roster = base / "roster.yaml"
    roster.write_text(json.dumps({"ops": [f"o_{secrets.token_hex(5)}"], "agents": [WRITER, READER]}))
    return generate(roster, base / "auth")


@asynccontextmanager
async def signed_in(nats_url: str, creds_dir: Path, ai_id: str) -> AsyncIterator[httpx2.AsyncClient]:
    app = create_app(nats_url, creds_dir=creds_dir, dev=False)
    try:
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=BASE) as client:
            reply = await client.post("/login", data={"ai_id": ai_id, "next": "/groups"})
            assert reply.status_code == 303, reply.text
            yield client
    finally:
        await app.state.console.close()


async def test_each_identity_reads_with_its_own_credentials(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle
) -> None:
    creds_dir = bundle.creds[WRITER].parent
    async with RecallClient(WRITER, secure_stack.nats_url, creds=str(bundle.creds[WRITER])) as writer:
        word = f"zs{secrets.token_hex(4)}"
        private = await writer.create_bead(f"private of the writer {word}", "only mine")
        public = await writer.create_bead(f"global of the writer {word}", "for everyone", visibility="global")

    async with signed_in(secure_stack.nats_url, creds_dir, WRITER) as as_writer:
        page = await as_writer.get(f"/beads/{private.bead_id}")
        assert page.status_code == 200 and private.title in page.text
    async with signed_in(secure_stack.nats_url, creds_dir, READER) as as_reader:
        hidden = await as_reader.get(f"/beads/{private.bead_id}")
        assert hidden.status_code == 404 and private.title not in hidden.text
        shown = await as_reader.get(f"/beads/{public.bead_id}")
        assert shown.status_code == 200 and public.title in shown.text
        found = await as_reader.get("/search", params={"q": word, "mode": "keyword"})
        assert public.title in found.text and private.title not in found.text

    app = create_app(secure_stack.nats_url, creds_dir=creds_dir, dev=False)
    try:
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=BASE) as anonymous:
            refused = await anonymous.post("/login", data={"ai_id": UNKNOWN})
            assert refused.status_code == 400 and "no credentials" in refused.text
    finally:
        await app.state.console.close()
