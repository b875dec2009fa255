"""Any single damaged byte in a segment: what is served is exactly what was written.

The only bytes no check can cover are the partition leader epoch (outside the CRC, no invariant
to test), so they are masked when comparing.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_broker.log import LogConfig, PartitionLog
from sdk.protocol.errors import KafkaStorageError
from sdk.records import RecordBatchBuilder, iter_batches

CONFIG = LogConfig(segment_bytes=1_500, index_interval_bytes=100, retention_ms=-1)


def masked(raw: bytes) -> bytes:
    return raw[:12] + b"\0\0\0\0" + raw[16:]


def build_log(directory: Path) -> dict[int, bytes]:
    plog = PartitionLog.open(directory, CONFIG, now_ms=0)
    for i in range(90):
        builder = RecordBatchBuilder()
        for j in range(i % 3 + 1):
            builder.append(1_000 + i, b"k", b"%d-%d" % (i, j))
        plog.append(builder.build(), now_ms=0)
    original = {b.base_offset: bytes(b.raw) for b in iter_batches(bytes(plog.read(0, 10**9).data))}
    plog.close()
    return original


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segment=st.integers(0, 9), where=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7),
       clean=st.booleans())
def test_a_flipped_byte_is_never_served(segment: int, where: float, bit: int, clean: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="corrupt-"))
    try:
        directory = tmp / "t-0"
        original = build_log(directory)
        files = sorted(directory.glob("*.log"))
        assert len(files) > 4
        segment = min(segment, len(files) - 1)  # the last one is the active segment
        victim = files[segment]
        raw = bytearray(victim.read_bytes())
        position = int(where * len(raw))
        raw[position] ^= 1 << bit
        victim.write_bytes(bytes(raw))
        if not clean:
            (directory / ".clean_shutdown").unlink()
            (directory / "partition.checkpoint").unlink()
        plog = PartitionLog.open(directory, CONFIG, now_ms=0)
        try:
            served = {}
            offset = 0
            while offset < plog.log_end_offset:
                try:
                    result = plog.read(offset, 700)
                except KafkaStorageError:
                    offset += 1
                    continue
                for batch in iter_batches(bytes(result.data)):
                    served[batch.base_offset] = bytes(batch.raw)
                offset = max(result.next_offset, offset + 1)
            for base, data in served.items():
                assert base in original and masked(data) == masked(original[base])
            # everything outside the damaged segment is still served
            lost = set(original) - set(served)
            bases = [int(f.name[:20]) for f in files]
            lo = bases[segment]
            hi = bases[segment + 1] if segment + 1 < len(bases) else 10**9
            assert all(lo <= b < hi for b in lost)
            last = next(iter_batches(original[max(original)]))
            if segment < len(files) - 1:
                assert plog.log_end_offset == last.next_offset  # closed segments are never cut
            else:  # the active segment loses at most a tail it cannot frame past
                assert lo <= plog.log_end_offset <= last.next_offset
        finally:
            plog._close_files()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
