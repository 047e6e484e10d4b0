"""What every GPU measurement script here shares: its two arguments, finding PyTorch with a
CUDA GPU, printing a row as it is measured, and the JSON file it writes.

Standard library only, like the scripts: the GPU machine they run on has no knee environment.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def parser(doc: str, peaks: dict) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--gpu", required=True, choices=sorted(peaks), help="which datasheet peaks to divide by")
    ap.add_argument("--out", help="write the rows (and the summary, where there is one) as JSON here")
    return ap


def check_parser(doc: str, peaks: dict) -> argparse.ArgumentParser:
    """:func:`parser` with ``--cpu-check``: tiny shapes on the CPU, to check a script's logic
    where there is no GPU (no figures)."""
    ap = parser(doc, peaks)
    ap.add_argument("--cpu-check", action="store_true", help="run tiny shapes on the CPU to check the script itself (no figures)")
    return ap


def run_cases(torch, what: str, cases: list[tuple], measure_one, rows: list, began: float, budget_s: float) -> None:
    """``measure_one(case)`` for each ``(shape, tp, ...)`` case, appending to ``rows`` and
    printing what each added. A case started past ``budget_s`` (a lease's run must end with its
    rows) or one that raises becomes a row with its reason; the rest go on."""
    for case in cases:
        label = {"what": what, "shape": case[0], "tp": case[1]}
        n = len(rows)
        if time.time() - began > budget_s:
            rows.append({**label, "error": f"not measured: past the {budget_s:.0f} s budget"})
        else:
            try:
                measure_one(case)
            except Exception as exc:  # noqa: BLE001 - one case failing must not lose the rest
                rows.append({**label, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
        for r in rows[n:]:
            emit(r)


def cuda_torch(tool: str, need_gpu: bool = True):
    """PyTorch, with a CUDA GPU visible unless ``need_gpu`` is False; None after saying why not."""
    try:
        import torch
    except ImportError:
        print(f"{tool}: PyTorch is not installed here (this measures a CUDA GPU; run it where one is)", file=sys.stderr)
        return None
    if need_gpu and not torch.cuda.is_available():
        print(f"{tool}: no CUDA GPU visible (this measures a CUDA GPU; run it where one is)", file=sys.stderr)
        return None
    return torch


def cpu_timer(fn) -> float:
    """Wall time of one call, for checking the script's logic where there is no GPU."""
    fn()
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def emit(row: dict) -> None:
    """One measured row on stdout, as it comes (a long run shows progress, a killed one its rows)."""
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)


def write(path: str | None, torch, gpu: str, peaks: dict, began: float, rows: list, summary: dict | None = None, **extra) -> dict:
    """The run's ``info`` (GPU, PyTorch and CUDA versions, seconds, peaks, ``extra``) and, when
    ``path`` is given, ``{"info", "summary" (where given), "rows"}`` written there as JSON."""
    info = {
        "gpu": gpu,
        "device_name": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (check only)",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "seconds": round(time.time() - began, 1),
        "peaks": peaks,
        **extra,
    }
    if path:
        with open(path, "w") as fh:
            json.dump({"info": info, **({"summary": summary} if summary is not None else {}), "rows": rows}, fh, indent=1)
    return info
