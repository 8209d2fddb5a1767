"""Analysis of prompts: CMI distributions (paper Fig. 1), loss landscapes (Fig. 2), learning curves (Fig. 3).

Each analysis is a plain function over tensors or run logs (``cmi``, ``landscape``, ``roughness``,
``curves``), an orchestration that turns a task and backbone into numbers (``reports``), and a figure
drawn by :mod:`.plotting`; the ``infoprompt analyze`` sub-commands in :mod:`.cli` wire them together and
store the numbers next to the PNG.
"""
