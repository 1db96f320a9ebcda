print("before import")
import torch  # noqa: E402,F401
