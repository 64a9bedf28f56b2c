"""What each norm option of issue 28 costs in training tokens/s, as a ratio to Pre-LN measured in the same run:
``normsearch bench options`` (normsearch/_option_cost.py has the details and the options)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from normsearch._option_cost import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
