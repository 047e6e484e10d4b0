"""`knee import FILE`: bring earlier runs (llm-optimizer JSONL/JSON, `vllm bench serve` JSON,
AIPerf `profile_export_aiperf.json`, knee JSON) into the study store beside knee's own."""

from __future__ import annotations

import json
import sys


def register(sub) -> None:
    p = sub.add_parser("import", help="import llm-optimizer, vllm bench serve or AIPerf results")
    p.add_argument("file", help="result file")
    p.add_argument("--study", help="study to import into (default: import-<file name>)")
    p.add_argument("--model", help="model the results are for, when the file does not say")
    p.add_argument("--workspace", help="directory of the study store (default .knee)")
    p.add_argument("--storage", help="study store path or SQLAlchemy URL")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    from core.results.io import import_file
    from core.results.store import StudyStore, default_storage

    store = StudyStore(args.storage or default_storage(args.workspace))
    name, n, fmt = import_file(store, args.file, study=args.study, model=args.model)
    if args.json:
        json.dump({"study": name, "points": n, "format": fmt}, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(f"imported {n} load point{'s' if n != 1 else ''} ({fmt}) into study {name!r}; see knee results --study {name}")
    return 0
