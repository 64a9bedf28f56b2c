"""What the report tests share: the synthetic study of tests/test_ranking.py, whose right answers are
known, and the numbers it should report."""

from test_ranking import final

PNGS = ("loss_curves", "residual_rms", "grad_norm", "attention_logits", "loss_vs_lr", "search_value", "importance",
        "site_effects", "history")
MEAN = lambda xs: sum(xs) / len(xs)
SCORE = {"pre_ln": MEAN(final("pre_ln", 3e-3)), "peri_ln": MEAN(final("peri_ln", 3e-3)), "hybridnorm": 2.02,
         "t3": MEAN(final("t3", 3e-3)), "t4": 2.30, "t5": MEAN(final("t5", 3e-3)), "t6": 3.00}
