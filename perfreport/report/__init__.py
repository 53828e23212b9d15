"""Rendering: report models -> text formats through the Jinja2 templates in ``templates/``."""
