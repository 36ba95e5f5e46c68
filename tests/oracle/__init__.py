"""The oracle test: any runner stream, any fault schedule, the ledger ends with what happened."""
