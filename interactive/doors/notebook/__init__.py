"""A notebook in the failed frame: cells run in the task's process, in the frame where it
failed, and answer with Jupyter's outputs (text, tables, figures, tracebacks).

- :mod:`.kernel`: the frame kernel, one worker thread per session that runs cells in the
  failed frame's namespace, with the interrupt;
- :mod:`.outputs`: a value, a figure or an exception turned into mime bundles (pure);
- :mod:`.streams`: ``print`` output of the cell's thread captured, other threads' left alone;
- :mod:`.starter`: the starter notebook written into the session's ``.vscode/podcode/``;
- :mod:`.here`: what a cell can call (the error, the inputs as at the call, run the task
  again in a new process, resume);
- :mod:`.routes`: the control API's ``/api/notebook/*`` routes, behind the session's token.

- :mod:`.jupyterlab`: JupyterLab served as the session's IDE (``ide="jupyter"``);
- :mod:`.bridge`: its ``podcode`` kernel, a process that sends each cell to the routes.

The clients: the companion extension's notebook controller
(``vscode_config/extension/lib/notebook.js``) and the bridge. Part of
:mod:`interactive.session`; it imports what the session may (the bridge, a process of
its own, imports only ipykernel, the standard library and the base layer's control-API
client).
"""
