"""Kubernetes: the client set-up, the table from API refusals to advice, label and
annotation names, the pod side (labels, events, the pod's own object) and the laptop side
(finding sessions, exec, port-forward).

Runs on: the pod and the laptop. May import: ``base``.
"""
