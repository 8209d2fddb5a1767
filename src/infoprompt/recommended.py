"""The one recommended method: the best adapter that keeps the encoder shared, by the committed numbers.

Named here once, in a module that imports nothing, so that the ``Classifier`` default, the CLI's ``--method``
default, ``infoprompt methods`` and the docs all agree and the CLI can read it before loading torch. The
evidence is docs/results.md ("Users' data"): the users' benchmark (issue #53) takes the method with the best
average among those whose run costs at most a fifth of SetFit's. On the MPNet 64-shot GLUE grid (SST-2, MRPC,
RTE, CoLA; seeds 1-3) ``top-lora-siamese`` averages 0.5863 (``setfit-lora-all`` 0.5701 in 30 min a task,
SetFit 0.5838 with a 439 MB copy of the encoder per task, ``top-lora`` 0.5637, the linear probe 0.5124) in
7-90 s of training a task with a 3.6 MB adapter; on the many-class files it is ``top-lora`` (a single text is
read alike) and far ahead of the probe.
"""

RECOMMENDED_METHOD = "top-lora-siamese"
