"""Experiment runner: sweep grids (``grid``), the result store (``store``), the sweep loop (``sweep``), tables (``report``)."""
