"""Textual TUI: the live capture dashboard and the results browser.

Layers, from data to screen: ``adapt_*`` turn an Analysis (or a partial bundle while capturing)
into frozen view-models (pure, no Textual import); ``widgets/`` draw one view-model each;
``results``/``live`` are the two screens; ``app.make_app`` builds the App for the CLI and the
tests; ``runner`` decides between the TUI and headless output. Textual is imported only by the
modules that draw, so ``diagnose --help`` never loads it.
"""
