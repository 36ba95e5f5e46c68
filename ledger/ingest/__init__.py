"""Worker uploads into the ledger: pure rules (`rules`), the transaction that applies an upload
(`store`), sheet row outcomes (`sheets`) and durable node observations (`observations`).
"""

__all__: list[str] = []
