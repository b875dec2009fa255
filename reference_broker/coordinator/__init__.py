"""Broker coordinators: state machines that keep their state in internal topics.

``group/`` is the classic-protocol group coordinator (``__consumer_offsets``); the transaction
coordinator (``__transaction_state``) goes in ``txn/``. Handlers stay thin and call into these.
"""
