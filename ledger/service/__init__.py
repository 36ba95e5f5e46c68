"""The HTTP service: `ledger.service.app.create_app`, served by `ledger serve`."""

__all__: list[str] = []
