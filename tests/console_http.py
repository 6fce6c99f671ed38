"""Signing in to the console the way its sign-in page asks: the form's token with the page's cookie."""

from __future__ import annotations

import re

import httpx2


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no form token on the page"
    return match[1]


async def sign_in(client: httpx2.AsyncClient, ai_id: str, next_page: str = "/groups") -> httpx2.Response:
    """Open the sign-in page, then post its form as ``ai_id``; the reply (a 303 when it worked)."""
    page = await client.get("/login")
    return await client.post("/login", data={"ai_id": ai_id, "next": next_page, "csrf": csrf_of(page.text)})
