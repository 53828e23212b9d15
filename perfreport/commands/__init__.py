"""The subcommands beside ``analyze`` and ``compare`` (``baseline``, ``config``, ``step-trace``)
and the hints the command line gives a newcomer: thin shells over the package, each adding its
own parser to :mod:`perfreport.cli` and computing nothing itself."""
