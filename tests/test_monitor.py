"""The run monitor's statistics of an evaluation."""

import numpy as np

from normsearch._monitor import bootstrap_se


def test_the_bootstrap_se_is_the_limit_of_resampling_the_windows():
    """The closed form is what resampling the windows converges to (20,000 draws agree within 3%),
    and not the n - 1 standard error, which is larger by sqrt(n / (n - 1))."""
    rng = np.random.default_rng(1)
    v = rng.gamma(2.0, 0.5, size=40)
    draws = v[rng.integers(0, len(v), size=(20_000, len(v)))].mean(axis=1).std(ddof=1)
    assert abs(bootstrap_se(v) / draws - 1) < 0.03
    assert bootstrap_se(v) < v.std(ddof=1) / np.sqrt(len(v))
    assert np.isnan(bootstrap_se([1.0]))
