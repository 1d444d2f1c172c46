"""Analytics over stored series: pure functions of (step, value) arrays, no I/O.

What explains instability, computed by the server from full-resolution points before any
downsampling: derived series (``ratio``, ``share``, ``rss``), transitions (slopes before
and after an event or a detected change point), spikes (start, peak, recovery, the share
of steps spent in them, which metric leads which) and layers (depth order, U-index).
"""
