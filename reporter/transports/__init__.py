"""How an upload reaches the ledger: the protocol and its errors (`protocol`), over HTTP (`http`) or in
process (`direct`).
"""
