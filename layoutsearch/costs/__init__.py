"""The cost model: small pure functions, the single source of every time and byte.

Modules: ``params`` (parameter counts), ``flops`` (work), ``memory`` (bytes at named moments),
``comms`` (collective times on the axes a group spans), ``pipeline`` (bubble, schedules),
``roofline`` (the book's closed-form thresholds). ``layoutsearch.costs.estimate`` composes them.
"""
