"""Development-only tools: the load test and the simulated room (loadtest, simload, honesty), the timing of every
lesson step and page button (timing), one Run under a memory budget (laptop), the model service as a thread or
a process (servicecost), and their commands (cli).

The top layer of specviz: these modules may import every folder below, and nothing in specviz, pages/ or app.py
imports them; only specviz/__main__.py, the command line's entry point, adds their commands to it
(tests/test_layers.py checks both).
"""
