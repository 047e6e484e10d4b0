"""Which instance, which layout, how many, at what cost: the estimator across the catalog.

:func:`recommend` runs ``knee estimate``'s own code (``core.estimate.report.estimate``) on every
instance type of the catalog (or those asked for), so a row agrees with ``knee estimate`` for
the same plan, and sizes each layout for a target rate on the pessimistic edge of the
estimate's error band (core/estimate/bands.py).

``core.recommend.measure`` takes the top rows further: deployed side by side on SageMaker,
benchmarked (``probe``), stored as one study (``measured_study``) and deleted
(``knee recommend --measure N``).
"""

from core.recommend.rank import Candidate, Excluded, Recommendation, RecommendRequest, recommend

__all__ = ["recommend", "RecommendRequest", "Recommendation", "Candidate", "Excluded"]
