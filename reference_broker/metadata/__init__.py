"""The cluster's metadata as every node sees it: images replayed from the metadata log.

``image`` (the immutable ``MetadataImage``), ``delta`` (replaying Kafka's metadata records onto
an image) and ``loader`` (the raft listener that keeps the image current and calls publishers).
"""
