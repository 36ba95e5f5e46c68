"""How an upload reaches the ledger: the protocol (`protocol`) and HTTP (`http`, over `ledger.client`);
in process, `ledger.reporting.direct`.
"""

__all__: list[str] = []
