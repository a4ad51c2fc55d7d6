"""Run in every notebook kernel that ``make nbtest`` and ``make execute`` start.

The book's rule: every axis a reader has to read carries a label. A figure shown with
``plt.show()`` is checked with :func:`attention_src.plotting.unlabelled_axes` first, and a
figure that breaks the rule fails its cell with the axes named. tests/nbkernel.py (nbval) and
the Makefile's ``execute`` target load this file with ``--IPKernelApp.exec_files``.
"""

import matplotlib.pyplot as plt


def _checked(show):
    def show_checked(*args, **kwargs):
        from attention_src.plotting import unlabelled_axes

        for num in plt.get_fignums():
            problems = unlabelled_axes(plt.figure(num))
            if problems:
                raise AssertionError("figure without axis labels: " + "; ".join(problems))
        return show(*args, **kwargs)

    show_checked.__wrapped__ = show
    return show_checked


plt.show = _checked(plt.show)
