"""knee's user interface: the Textual app and the ``knee`` command line."""
