import numpy as np

from core.spec import RequestRecord


def test_record_latencies_from_lists_and_numpy_arrays():
    for times in ([0.05, 0.06, 0.07], np.array([0.05, 0.06, 0.07])):
        r = RequestRecord(index=0, send_time=0.0, output_tokens=3, chunk_times=times, chunk_tokens=[1, 1, 1], end_time=0.07)
        assert abs(r.ttft - 0.05) < 1e-12 and abs(r.tpot - 0.01) < 1e-12 and abs(r.e2e - 0.07) < 1e-12
    empty = RequestRecord(index=1, send_time=0.0, chunk_times=np.array([]), error="timeout")
    assert empty.ttft is None and not empty.ok
