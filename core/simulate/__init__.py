"""knee's ``sim`` engine: vLLM's V1 scheduler simulated over the estimator's cost model.

- :func:`simulate` runs one load point in virtual time and returns a :class:`SimResult`
  (records, summary, preemptions, KV peak, time series); every number is labelled simulated.
- :class:`InfeasibleConfig` is raised where a real vLLM would refuse to start (out of
  memory, invalid configuration); ``.kind`` and ``.reason`` say which and why.
- ``python -m core.simulate.server`` plays the simulation in real time behind an
  OpenAI-compatible streaming API on 127.0.0.1.
- :class:`StepProfile` / :func:`fit_step_profile`: a step-time model fitted from real
  measurements, for hosts the roofline does not describe (vLLM on CPU), passed as
  ``simulate(..., cost=profile)``.
"""

from core.simulate.profiles import MeasuredPoint, StepProfile, cpu_hardware, fit_step_profile
from core.simulate.sim import InfeasibleConfig, SimResult, check_config, simulate

__all__ = [
    "simulate",
    "SimResult",
    "InfeasibleConfig",
    "check_config",
    "StepProfile",
    "MeasuredPoint",
    "fit_step_profile",
    "cpu_hardware",
]
