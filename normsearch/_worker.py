"""One local worker process of a job (``python -m normsearch._worker``, started by
:func:`normsearch.search.run_workers`): it reads its job from its environment, typed
(:meth:`normsearch.jobs.Job.from_json`), runs it, and reports progress as JSON lines on stdout."""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    from .cli_support import interrupted_code, stop_on_sigterm
    from .errors import NormsearchError
    from .jobs import Job
    from .progress import JsonLines
    from .search import WORKER_INDEX, WORKER_JOB, WORKER_NAME, WORKER_STORAGE, WORKER_VERBOSE, StudyInterrupted

    import logging

    verbose = bool(os.environ.get(WORKER_VERBOSE))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s")
    stop_on_sigterm()
    try:
        job = Job.from_json(json.loads(os.environ[WORKER_JOB]), storage=os.environ[WORKER_STORAGE])
        with JsonLines(os.environ.get(WORKER_NAME, "worker")) as display:
            job.work(display, verbose, int(os.environ.get(WORKER_INDEX, "0")))
    except (StudyInterrupted, KeyboardInterrupt):
        return interrupted_code()
    except NormsearchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
