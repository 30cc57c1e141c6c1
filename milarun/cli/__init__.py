"""The ``milarun`` command line: coleo commands that parse, call one use case and print."""
