"""One module per benchmark, each run as ``s2s-bench <name>`` and ending with one JSON object."""
