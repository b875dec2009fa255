"""librdkafka's in-process mock cluster, driven through its C API.

The mock cluster is a Kafka broker nobody on this project wrote, which makes it a useful second
opinion on the SDK's wire behaviour. confluent-kafka only exposes it through the
``test.mock.num.brokers`` setting, which cannot create topics with a chosen partition count, so
this module calls librdkafka's ``rd_kafka_mock_*`` functions in the copy of librdkafka that
confluent-kafka ships. Needs confluent-kafka installed (a test dependency).
"""

from __future__ import annotations

import ctypes
import glob
import os
from types import TracebackType

_RD_KAFKA_PRODUCER = 0


def _load_librdkafka() -> ctypes.CDLL:
    import confluent_kafka

    site = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    candidates = sorted(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*")))
    candidates += ["librdkafka.so.1"]
    errors = []
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            errors.append(f"{path}: {exc}")
            continue
        _declare(lib)
        return lib
    raise RuntimeError("librdkafka not found: " + "; ".join(errors))


def _declare(lib: ctypes.CDLL) -> None:
    vp, cp, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    lib.rd_kafka_conf_new.restype = vp
    lib.rd_kafka_conf_set.argtypes = [vp, cp, cp, cp, ctypes.c_size_t]
    lib.rd_kafka_new.restype = vp
    lib.rd_kafka_new.argtypes = [i, vp, cp, ctypes.c_size_t]
    lib.rd_kafka_destroy.argtypes = [vp]
    lib.rd_kafka_mock_cluster_new.restype = vp
    lib.rd_kafka_mock_cluster_new.argtypes = [vp, i]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [vp]
    lib.rd_kafka_mock_cluster_bootstraps.restype = cp
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [vp]
    lib.rd_kafka_mock_topic_create.restype = i
    lib.rd_kafka_mock_topic_create.argtypes = [vp, cp, i, i]
    lib.rd_kafka_mock_push_request_errors_array.restype = None
    lib.rd_kafka_mock_push_request_errors_array.argtypes = [
        vp, ctypes.c_int16, ctypes.c_size_t, ctypes.POINTER(i)
    ]


class LibrdkafkaMockCluster:
    """A running mock cluster: ``bootstrap`` to connect to, ``create_topic`` to add topics.

    Facts worth knowing when testing against it: topics auto-created by a Metadata or Produce
    request get 4 partitions, it keeps only about 5 MiB per partition, it does not filter aborted
    transactional data for read_committed consumers and it drops offsets sent to a transaction.
    """

    def __init__(self, num_brokers: int = 1):
        self._lib = _load_librdkafka()
        errstr = ctypes.create_string_buffer(512)
        conf = self._lib.rd_kafka_conf_new()
        # A quiet handle: it only hosts the cluster, it never connects anywhere.
        self._lib.rd_kafka_conf_set(conf, b"log_level", b"0", errstr, 512)
        self._rk = self._lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, 512)
        if not self._rk:
            raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode()}")
        self._cluster = self._lib.rd_kafka_mock_cluster_new(self._rk, num_brokers)
        if not self._cluster:
            self._lib.rd_kafka_destroy(self._rk)
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.bootstrap: str = self._lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()

    def create_topic(self, name: str, partitions: int, replication_factor: int = 1) -> None:
        err = self._lib.rd_kafka_mock_topic_create(
            self._cluster, name.encode(), partitions, replication_factor
        )
        if err:
            raise RuntimeError(f"rd_kafka_mock_topic_create({name!r}) failed with error {err}")

    def push_request_errors(self, api_key: int, *errors: int) -> None:
        """The next ``len(errors)`` requests with ``api_key`` get these error codes in turn (0 lets
        one through), whichever broker they reach: librdkafka's error injection, for testing a
        client's error handling against a broker nobody here wrote."""
        array = (ctypes.c_int * len(errors))(*errors)
        self._lib.rd_kafka_mock_push_request_errors_array(self._cluster, api_key, len(errors), array)

    def close(self) -> None:
        if self._cluster:
            self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
            self._cluster = None
        if self._rk:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None

    def __enter__(self) -> LibrdkafkaMockCluster:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
