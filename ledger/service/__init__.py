"""The HTTP service (SPEC 4.1): `ledger.service.app.create_app`, served by `ledger serve`."""
