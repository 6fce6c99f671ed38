"""``recall console``: a web console that is just another client of the hub.

The console acts as **one hub identity per browser session** and reads everything through
:class:`recall_client.RecallClient` as that identity, so it can show nothing the identity may not see;
it never reads FalkorDB or Redis.

Stable entry point (used by ``recall console`` and by tests that serve it with uvicorn)::

    create_app(nats_url: str, *, creds_dir: str | Path | None = None, dev: bool = True,
               secret: str | None = None, settings: ConsoleSettings | None = None) -> starlette.applications.Starlette

* ``nats_url``: the hub's NATS URL (comma-separated for a cluster).
* ``creds_dir``: a directory of ``<ai id>.creds`` files (the login page lists those ids), or one
  ``.creds`` file (the console is that identity, no login). When given, ``dev`` is ignored.
* ``dev``: without ``creds_dir``, NATS runs without auth and the login page takes any AI id.
* ``secret``: the key that signs the sign-in form's token; default ``settings.secret``, else a random one.
* ``settings``: :class:`~recall_hub.console.settings.ConsoleSettings` (connection cap, idle time, allowed
  hosts); default read from ``RECALL_CONSOLE_*`` environment variables.

Sessions are kept in the console's memory: they end when it stops, and signing out ends one everywhere.

The app's state (``app.state.console``) holds one client per identity in use (at most
``settings.max_clients``, each closed once idle); they are closed by the app's lifespan shutdown, or by
``await app.state.console.close()`` when the app is driven without one.

Pages: ``/groups``, ``/groups/{id}/graph``, ``/groups/{id}/audit``, ``/search``, ``/beads/{id}``,
``/handoffs``, ``/feed/{id}``; JSON: ``/api/groups/{id}/graph``; server-sent events:
``/api/feed/{id}/events``. See docs/console.md.
"""

from .app import create_app

__all__ = ["create_app"]
