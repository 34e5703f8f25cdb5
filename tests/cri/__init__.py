"""CRI endpoint tests: a package, so that its conftest and helpers import as
`.conftest` / `.h2client` without shadowing other directories' conftest."""
