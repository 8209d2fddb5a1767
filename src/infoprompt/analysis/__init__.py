"""Analysis of prompts: CMI distributions (paper Fig. 1), loss landscapes (Fig. 2), learning curves (Fig. 3).

Each analysis is a plain function over tensors or run logs (``cmi``, ``landscape``, ``roughness``,
``curves``), one end-to-end module per figure that computes its numbers, stores them and draws it
(``cmi_report``, ``landscape_report``, ``curves_report``; figures drawn by :mod:`.plotting`, redrawn from
saved numbers by :mod:`.redraw`), and the ``infoprompt analyze`` sub-commands in :mod:`.cli`.
"""
