"""Sphinx configuration of the rendered gallery (`make docs`, `cfkit docs`).

:mod:`cfkit.interactive.gallery` assembles the pages (the README's table, the figures of results/, the notebooks as executed by
the last `make reproduce`, the benchmark page) in a staging folder and runs Sphinx on it with this folder as the
configuration directory. myst-nb renders the notebooks' saved outputs; nothing is executed. The built pages load
nothing from the internet: no widget manager or require.js from a CDN, no MathJax (the notebooks write their few
formulas in plain Unicode), the theme's fonts and scripts served from _static.
"""
project = "cfkit"
author = "cfkit"
copyright = "cfkit contributors"
html_title = "cfkit gallery"

extensions = ["myst_nb"]
nb_execution_mode = "off"  # render the outputs saved by `make reproduce`; never run a notebook here
nb_ipywidgets_js = {}  # the executed notebooks hold no live widgets (interactive = False): no CDN scripts for them
nb_merge_streams = True  # one block per cell for stdout/stderr, not a block per write
nb_render_markdown_format = "myst"  # the notebooks' Markdown outputs are tables (commonmark has none)
nb_mime_priority_overrides = [("html", "text/latex", None)]  # LaTeX outputs would need MathJax: show their text
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

html_theme = "pydata_sphinx_theme"
templates_path = ["_templates"]
html_static_path = ["_static"]
html_css_files = ["gallery.css"]
html_show_sourcelink = False
html_copy_source = False
html_last_updated_fmt = None
html_theme_options = {
    "navigation_with_keys": False,
    "show_prev_next": True,
    "secondary_sidebar_items": [],  # room for the notebooks' code, tables and figures
    "footer_start": ["copyright"],
    "footer_end": [],
    "icon_links": [],
    "navbar_center": [],  # the notebooks' long titles go in the left sidebar, not the top bar
}
html_sidebars = {"index": [], "**": ["gallery-nav.html"]}
