"""The cost model: small pure functions, the single source of every time and byte.

Modules: ``params`` (parameter counts), ``flops`` (work), ``memory`` (bytes at named moments),
``comms`` (collective times on the axes a group spans), ``pipeline`` (bubble, microbatches in
flight), ``roofline`` (the gather-volume objective), ``terms`` (every term over numpy arrays keyed
by the decisions it depends on), ``step`` (how the terms add up to a step), ``estimate``
(one layout, itemised) and ``goodput`` (the share of a run's wall time that trains).
"""
