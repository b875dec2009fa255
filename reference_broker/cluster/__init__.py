"""The replicated reference cluster: a node's membership in it and the harness that runs one.

The broker side of cluster mode (registration, heartbeats, publishing the metadata image to the
broker's handlers) lives beside the local test harness: ``launcher`` starts N combined-mode node
processes on 127.0.0.1..N, ``proxy`` puts a controllable TCP proxy in front of each node so a test
can cut links between nodes and clients. Nothing here runs on a single-node broker.
"""
