"""The per-release archive: a static site of every release's report and the trends across them
(``perfreport archive add|list|show|rm``), published as is with GitHub Pages.

    metrics    the tracked numbers of a release, read from its report.json; release-over-release change
    store      the site folder: index.json (the truth), release folders, atomic locked updates
    site       index.html from index.json: release table and trend charts
    commands   the CLI subcommands
"""
