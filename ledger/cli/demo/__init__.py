"""`ledger demo`: the command (`command`), the scripted run it drives (`scenario`, `run`) and its
terminal view (`view`).
"""

__all__: list[str] = []
