"""Background work of a server process: compaction and retention on their clocks, and the
delivery of alert notifications."""
