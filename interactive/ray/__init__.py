"""Ray and KubeRay: a session in the worker where a Ray task or actor method failed.

- :mod:`.worker`: what a Ray worker changes for a task (the ``working_dir`` copy it runs,
  code shipped by value located in that copy);
- :mod:`.bugs`: one session per bug across a job (a Ray actor keeps the board).

Nothing here is imported unless Ray is (``"ray" in sys.modules``).

Runs on: the pod (a Ray worker). May import: ``base``, ``storage``, ``resume``.
"""
