# airlock_mpl_backend: the matplotlib backend of airlock's Python kernel (like Jupyter's
# inline backend). Figures are drawn with Agg; plt.show() hands every open figure to the
# kernel's display() (a PNG result) and closes it. Selected by the kernel when matplotlib
# is imported inside a code-interpreter context; outside the kernel it behaves like Agg.
import sys

from matplotlib._pylab_helpers import Gcf
from matplotlib.backends.backend_agg import FigureCanvasAgg, FigureManagerBase  # noqa: F401

FigureCanvas = FigureCanvasAgg
FigureManager = FigureManagerBase


def show(*args, **kwargs):
    rt = sys.modules.get("airlock_display")
    managers = Gcf.get_all_fig_managers()
    if rt is None:
        return
    try:
        for m in managers:
            rt.display(m.canvas.figure)
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")


def draw_if_interactive():
    pass
