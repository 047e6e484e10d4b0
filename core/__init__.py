"""knee's engine: everything below the user interface.

Nothing in this package imports Textual, Rich or ``tui``; tests/test_architecture.py
enforces it, so the headless commands stay fast and the engine stays reusable.
"""

__version__ = "0.1.0"
