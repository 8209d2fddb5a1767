"""Peer baselines outside PromptClassifier: peft prompt tuning, the linear probe, SetFit, bottleneck adapters.

Each kind module registers in :mod:`infoprompt.kinds`, which builds, trains and loads models of every kind.
"""
