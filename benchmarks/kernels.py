"""Times the Triton norm kernels against torch eager, torch.compile and Liger-Kernel on a CUDA GPU.

    python benchmarks/kernels.py --out results/kernels     (--help for the options)
"""

import sys

from normsearch.kernels.bench import main

if __name__ == "__main__":
    sys.exit(main())
