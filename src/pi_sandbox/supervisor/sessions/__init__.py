"""Session files and what is built on them: the append-only JSONL store, the entry tree,
resuming, forking and compaction (pi docs session-format.md, sessions.md, compaction.md)."""
