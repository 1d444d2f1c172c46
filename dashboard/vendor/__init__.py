"""plotly.js's official cartesian bundle, served in place of the full plotly.js
(`..scripts`).

``plotly-cartesian.min.js`` is the file of the npm package ``plotly.js-cartesian-dist-min``
at the version below, unchanged: the distributed build of plotly.js (github.com/plotly/plotly.js)
with only its cartesian trace modules (bar, box, contour, heatmap, histogram, histogram2d,
histogram2dcontour, image, pie, scatter, scatterternary, violin), 1.5 MB where the full
bundle Dash ships is 4.8 MB. plotly.js is MIT licensed: ``LICENSE`` beside this file.

The version is the one of the full bundle Dash's graphs are built against (the ``plotly``
package's ``plotly.min.js``); ``tests/dashboard/test_plotly_bundle.py`` fails when an
upgrade moves it. To update: ``npm pack plotly.js-cartesian-dist-min@<version>`` and copy
its ``plotly-cartesian.min.js`` and ``LICENSE`` here.
"""

from __future__ import annotations

__version__ = "4.1.1"
BUNDLE = "plotly-cartesian.min.js"
SHA256 = "79542150855a52c567260e3137095dbe2b744e6d702a5cabe67da246942fba7a"
"""The file as the npm package ships it."""
TRACE_TYPES = frozenset(
    {
        "bar",
        "box",
        "contour",
        "heatmap",
        "histogram",
        "histogram2d",
        "histogram2dcontour",
        "image",
        "pie",
        "scatter",
        "scatterternary",
        "violin",
    }
)
"""The trace types the bundle draws; a figure of any other type draws nothing."""
