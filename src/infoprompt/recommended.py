"""The one recommended method: the best adapter that keeps the encoder shared, by the committed numbers.

Named here once, in a module that imports nothing, so that the ``Classifier`` default, the CLI's ``--method``
default, ``infoprompt methods`` and the docs all agree and the CLI can read it before loading torch. The
evidence is docs/results.md: on the MPNet 64-shot GLUE grid (SST-2, MRPC, RTE, CoLA; seeds 1-3),
``setfit-lora-all`` averages 0.5701 (SetFit 0.5838 with a 439 MB copy of the encoder per task; ``top-lora``
0.5637 at a fifth of the time; the linear probe 0.5124) with a 2.7 MB adapter.
"""

RECOMMENDED_METHOD = "setfit-lora-all"
