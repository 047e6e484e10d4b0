"""Widgets of the knee app, one per module."""
