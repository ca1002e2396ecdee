"""The ``skilldesk`` command line: one command, subcommands in modules of this package."""
