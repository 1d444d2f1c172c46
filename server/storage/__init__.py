"""The storage engine: every SQL statement of the service, and the formats it stores.

Lowest first:

- ``sql``: statement helpers (padded row counts, VALUES tables, the driver connection).
- ``blocks``, ``pgcopy``: hot points, a row a series and batch, written by binary COPY.
- ``chunks``, ``m4``: compacted points with their summaries (the pyramid's levels), and the
  M4 selection a chart read ends with.
- ``runs``, ``metric_ids``, ``points``, ``versions``: a run's lock, segments, lineage and
  events; metric names to ids; hot points in and out; what a read of them depends on.
- ``pyramid``: chart reads over hot points, chunks and summaries.
- ``policy``, ``placement``, ``compaction``, ``schedule``, ``vacuum``, ``retention``: moving
  hot points into chunks, when, and forgetting old runs.
- ``citus``: where the tables sit on a Citus cluster (below the rest: migrations place them).
- ``outbox``, ``gauges``, and the rest of the metadata's SQL: alert notifications, scrape-time
  gauges.

The background threads that run compaction and retention are in :mod:`..workers`.
"""
