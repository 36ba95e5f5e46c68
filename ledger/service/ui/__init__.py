"""The dashboard at `/ui/`: server-rendered pages, a little JavaScript that reads the JSON API and
the SSE tail with the session cookie, and CSS of its own. Read-only, and nothing is fetched from
anywhere but this service."""

from ledger.service.ui.routes import router

__all__ = ["router"]
