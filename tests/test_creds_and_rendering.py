"""One reading of a credentials file and one layout of a rendered bead, on both sides of the client/hub line."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path

import nkeys
import pytest
from recall_client.client import creds_identity
from recall_hub.tooling.auth import AuthError, encode_jwt, format_creds, identity_of
from recall_schemas import MemoryBead, Unauthorized
from recall_schemas.creds import jwt_claims, parse_creds
from recall_schemas.rendering import render_bead


def key(prefix: int) -> nkeys.KeyPair:
    return nkeys.from_seed(bytearray(nkeys.encode_seed(secrets.token_bytes(32), prefix)))


def creds_file(tmp_path: Path, name: str) -> Path:
    account, user = key(nkeys.PREFIX_BYTE_ACCOUNT), key(nkeys.PREFIX_BYTE_USER)
    jwt = encode_jwt(account, bytes(user.public_key).decode(), name, {"type": "user"})
    path = tmp_path / f"{name}.creds"
    path.write_text(format_creds(jwt, bytes(user.seed).decode()))
    return path


def test_the_client_and_the_hub_read_the_same_identity_from_a_credentials_file(tmp_path: Path) -> None:
    path = creds_file(tmp_path, "a_reader01")
    assert creds_identity(str(path)) == identity_of(path) == "a_reader01"
    jwt, seed = parse_creds(path.read_text())
    assert jwt_claims(jwt)["name"] == "a_reader01" and seed.startswith("SU")


NOT_CREDS = ["", "not creds", "-----BEGIN NATS USER JWT-----\nabc\n------END NATS USER JWT------\n"]


@pytest.mark.parametrize("text", NOT_CREDS)
def test_a_file_that_is_not_credentials_is_refused_by_both(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.creds"
    path.write_text(text)
    with pytest.raises(Unauthorized):
        creds_identity(str(path))
    with pytest.raises(AuthError):
        identity_of(path)


def test_a_bead_renders_one_way_and_its_id_ends_the_header() -> None:
    day = datetime(2026, 12, 3, tzinfo=UTC)
    bead = MemoryBead(
        bead_id="b_0123456789abcdef0123456789abcdef", title="Retry payments", content="Three tries, then alert.",
        content_hash="0" * 64, bead_type="decision", importance=8, tags=[], created_by="a_writer01",
        created_at=day, updated_at=day, accessed_at=day, visibility="private",
    )
    text = render_bead(bead)
    header, _, rest = text.partition("] ")
    assert header.endswith(f"| {bead.bead_id}") and "| private |" in header and "| 2026-12-03 |" in header
    assert rest == "Retry payments\nThree tries, then alert."
    assert render_bead(bead.model_copy(update={"content": "Retry payments"})).endswith("] Retry payments")
