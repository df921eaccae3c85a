"""Distributed ranks: rank discovery, the collective (NCCL/gloo) abort, and the
peers (sessions of one pod and job) that share one status.

Runs on: the pod. May import: ``base``, ``storage``, ``kube``, ``reaper``.
"""
