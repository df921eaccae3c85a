"""Pure rendering: jinja2 templates for VS Code configuration, entry scripts and emails."""
