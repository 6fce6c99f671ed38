"""The console on a secure bus: it signs in only as identities whose credentials it holds, and each
browser session reads the hub with that identity's NATS credentials, so the hub decides what it sees."""

from __future__ import annotations

import json
import logging
import secrets
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from console_http import sign_in
from recall_client import RecallClient
from recall_hub.console import create_app
from recall_hub.service.endpoints import HubService
from recall_hub.tooling.auth import AuthBundle, generate
from recall_hub.tooling.stack import EmbeddedStack

BASE = "http://127.0.0.1:8800"
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
            reply = await sign_in(client, ai_id)
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
            refused = await sign_in(anonymous, UNKNOWN)
            assert refused.status_code == 400 and "no credentials" in refused.text
    finally:
        await app.state.console.close()


async def test_the_console_holding_one_identity_signs_in_as_it_without_asking(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle
) -> None:
    app = create_app(secure_stack.nats_url, creds_dir=bundle.creds[READER], dev=False)
    try:
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=BASE) as browser:
            signed_in = await browser.get("/login", params={"next": "/search"})
            assert signed_in.status_code == 303 and signed_in.headers["location"] == "/search"
            page = await browser.get("/search")
            assert page.status_code == 200 and f"Acting as <strong>{READER}</strong>" in page.text
            assert "/logout" not in page.text  # nobody else to be
    finally:
        await app.state.console.close()


async def test_a_missing_or_misnamed_credentials_file_is_refused_without_showing_a_path(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    data_dir = tmp_path / "recall-data"
    creds_dir = data_dir / "auth" / "creds"
    creds_dir.mkdir(parents=True)
    shutil.copy(bundle.creds[WRITER], creds_dir / f"{WRITER}.creds")
    misnamed, missing = f"a_{secrets.token_hex(5)}", f"a_{secrets.token_hex(5)}"
    shutil.copy(bundle.creds[READER], creds_dir / f"{misnamed}.creds")  # the reader's file, under another name
    (creds_dir / f"{missing}.creds").write_text("removed after the console started\n")
    app = create_app(secure_stack.nats_url, creds_dir=creds_dir, dev=False)
    (creds_dir / f"{missing}.creds").unlink()
    try:
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=BASE) as browser:
            login = await browser.get("/login")
            assert f'value="{misnamed}"' in login.text and f'value="{missing}"' in login.text
            with caplog.at_level(logging.WARNING, logger="recall_hub.console"):
                for ai_id in (misnamed, missing):
                    refused = await sign_in(browser, ai_id)
                    assert refused.status_code == 403 and f"cannot connect as {ai_id}" in refused.text
                    assert "recall_console" not in browser.cookies
                    for fragment in (str(data_dir), "recall-data", "/auth/", "creds/", ".creds", str(tmp_path)):
                        assert fragment not in refused.text, (ai_id, fragment)
            logged = caplog.text  # the detail is in the console's log
            assert f"{misnamed}.creds belong to {READER}" in logged and f"{missing}.creds" in logged
            assert (await sign_in(browser, WRITER)).status_code == 303  # a good file next to them still works
            # another site cannot switch the browser to another identity the console holds
            switched = await browser.post("/login", data={"ai_id": misnamed}, headers={"Origin": "https://evil.example"})
            assert switched.status_code == 403
            assert f"Acting as <strong>{WRITER}</strong>" in (await browser.get("/groups")).text
    finally:
        await app.state.console.close()
