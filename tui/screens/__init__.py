"""The app's screens: the five modes and the modal dialogs, one per module."""
