"""The idle reaper: the pure idle decision, the activity and GPU samplers, the
monitor loop that warns and reaps, cleanup (checkpoint, save edits, stop the IDE) and mail.

Runs on: the pod, on the session's loop thread. May import: ``base``, ``storage``, ``kube``.
"""
