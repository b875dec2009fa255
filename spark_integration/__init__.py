"""PySpark helpers for exactly-once consume-transform-produce pipelines.

Nothing lives here yet: the helpers arrive with the Spark issue, after the consumer and
transactions exist in the SDK.
"""
