"""UI-free helpers for the app: turn core objects into what the screens show.

Nothing here imports Textual, so these are tested and benchmarked as plain functions.
"""
