from ledger.cli.app import main

__all__: list[str] = []

main()
