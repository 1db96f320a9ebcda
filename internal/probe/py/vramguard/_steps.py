"""Training steps: every optimizer step of the job, counted by a hook on
torch.optim, and the steps a loop without an optimizer counts itself
(vramguard.step()). Samples and checkpoint events carry both counts.

The counts are plain module globals: incrementing one is the whole cost of
the optimizer hook. A forked child counts its own from zero (reset).
"""

import sys

optimizer_steps = 0
user_steps = 0


def step(n=1):
    """Count n training steps, for loops that do not use torch.optim."""
    global user_steps
    user_steps += n


def reset():
    """In a forked child: its own steps, from zero."""
    global optimizer_steps, user_steps
    optimizer_steps = 0
    user_steps = 0


def count_post_hook(optimizer, args, kwargs):
    global optimizer_steps
    optimizer_steps += 1


def patch_optimizer():
    """Count optimizer steps. torch >= 2.0 has a global post-step hook; older
    versions call Optimizer._optimizer_step_code after every step of any
    optimizer class, which is wrapped instead. Either way nothing of the probe
    is on the stack while step() runs."""
    mod = sys.modules.get("torch.optim.optimizer")
    if mod is None:
        return None
    reg = getattr(mod, "register_optimizer_step_post_hook", None)
    if reg is not None:
        reg(count_post_hook)
        return "post_hook"
    opt = getattr(mod, "Optimizer", None)
    orig = getattr(opt, "__dict__", {}).get("_optimizer_step_code")
    if orig is None:
        return None
    if isinstance(orig, staticmethod):
        fn = orig.__func__

        def _optimizer_step_code():
            global optimizer_steps
            optimizer_steps += 1
            return fn()

        opt._optimizer_step_code = staticmethod(_optimizer_step_code)
    else:

        def _optimizer_step_code(self):
            global optimizer_steps
            optimizer_steps += 1
            return orig(self)

        opt._optimizer_step_code = _optimizer_step_code
    return "step_code"
