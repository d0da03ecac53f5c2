"""The ``d5pipe`` command line: one module per subcommand (``add_arguments`` + ``main``)."""
