"""knee's engine: everything below the user interface.

Nothing in this package imports Textual, Rich or ``tui``; tests/test_architecture.py
enforces it, so the headless commands stay fast and the engine stays reusable. (httpx is
imported only by the load client's httpx transports, never at import time: importing it loads
rich through its optional command-line tool.)
"""

__version__ = "0.1.0"
