"""Stages after a search, above both the search (which trains them) and the ranking (which picks what
they train): the confirmation (:mod:`.confirm`), its racing (:mod:`.racing`) and the scale ladder
(:mod:`.ladder`, its report :mod:`.ladder_report`)."""
