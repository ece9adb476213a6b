"""One scrape: every collector run under its deadline, the resource labels, and the rendering of
the exposition.
"""
