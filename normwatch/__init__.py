"""normwatch: live instability monitoring for large-model training runs.

``normwatch.client`` streams metrics from a trainer, ``normwatch.server`` stores and
serves them, ``normwatch.dashboard`` draws them.
"""

__version__ = "0.1.0"
