"""Helpers for the real-component test tiers (a real vLLM on CPU, its tiny model, its benchmark).

Everything here works from the project's virtual environment and drives `.venv-vllm` through
subprocesses, because vLLM's pins (transformers<5.20, torch) cannot share an environment with
knee's.

Import it as `support` (`from support.vllm_server import start_vllm_server`): pytest puts
`tests/` on sys.path through the root conftest, and the name `tests` itself is taken in the
project venv by a top-level package that smdebug_rulesconfig (a sagemaker dependency) installs.
"""
