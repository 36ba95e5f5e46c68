"""Where the ledger and the reporter meet: the parts that know both packages.

`reporter` is a client of the ledger and imports only its shared core (`ledger.validate`,
`ledger.errors`, `ledger.client`, `ledger.tracing`); what needs the ledger's stores as well lives
here (`direct.DirectTransport`), beside `ledger report` (`ledger.cli.report`) and the demo
(`ledger.cli.demo`).
"""

__all__: list[str] = []
