# A torch whose import fails halfway, as a wheel built for another CUDA
# does: used to check the probe leaves the ImportError's traceback as is.
import os  # noqa: F401

from . import _C  # noqa: F401
