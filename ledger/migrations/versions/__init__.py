"""The revisions, oldest first by their number."""
