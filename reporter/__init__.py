"""The worker-side progress reporter: folds runner events into step progress and uploads it."""
