"""What the autosave scripts (script_autosave.py, autosave_fallback.py)
share: a seeded Linear(3, 1) model with Adam that train() steps, the
autosave started on it, and the report of what autosave saved.

    rig = autosave_rig.Rig()          torch seeded 0, rig.m, rig.opt, rig.step
    rig.train(n)                      n optimizer steps, counted in rig.step
    a = rig.autosave(facts, d, **kw)  vramguard.autosave(model, opt, dir=d,
                                      every="1h", keep=10, **kw); on its
                                      AutosaveError, facts["error"] is it,
                                      facts are printed and the script ends
    rig.report(facts, d)              facts["saves"]: [file step, Adam's step
                                      in the file] for each save in d, oldest
                                      first; facts["steps"]; facts printed as
                                      one JSON line
"""

import json
import os
import sys

import torch
import vramguard
import vramguard.autosave

engine = sys.modules["vramguard.autosave"]


class Rig:
    def __init__(self):
        torch.manual_seed(0)
        self.m = torch.nn.Linear(3, 1)
        self.opt = torch.optim.Adam(self.m.parameters(), lr=0.01)
        self.step = 0

    def train(self, n):
        for _ in range(n):
            self.m(torch.randn(2, 3)).sum().backward()
            self.opt.step()
            self.opt.zero_grad()
            self.step += 1

    def autosave(self, facts, d, **kw):
        try:
            return vramguard.autosave(model=self.m, opt=self.opt, dir=d, every="1h", keep=10, **kw)
        except engine.AutosaveError as e:
            facts["error"] = str(e)
            print(json.dumps(facts))
            sys.exit(0)

    def report(self, facts, d):
        saves = []
        for p in engine.files(d):
            sd = torch.load(p)
            st = sd["objects"]["opt"]["state"]
            saves.append([os.path.basename(p).rsplit("-", 1)[1], int(st[0]["step"]) if st else 0])
        facts["saves"] = saves
        facts["steps"] = self.step
        print(json.dumps(facts))
