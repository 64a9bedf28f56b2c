"""normsearch's trial loop against a bare PyTorch loop: see normsearch/benchmark.py.

    python benchmarks/trial_overhead.py [--layers 4 --steps 200 --repeats 3]
"""

import sys

from normsearch.benchmark import main

sys.exit(main(sys.argv[1:]))
