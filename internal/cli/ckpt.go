package cli

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vramguard/vramguard/internal/ckpt"
	"github.com/vramguard/vramguard/internal/termsafe"
)

// NewCmdCkpt builds `vramguard ckpt` and its subcommands.
func NewCmdCkpt(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ckpt <command>",
		Short: "Inspect, verify, pick, prune and scan checkpoints without Python",
		Long: `ckpt reads PyTorch checkpoints without Python and without loading tensors:
torch zip (torch.save since 1.6), the legacy format, safetensors,
torch.distributed.checkpoint directories, HF Trainer checkpoint-N
directories, Lightning .ckpt and plain pickles. Formats are recognised by
their bytes, never by file names, and only the metadata is read.

Pickles are decoded symbolically: nothing in a checkpoint is ever executed.

Exit status: 0 ok, 1 the check failed (invalid checkpoint, nothing found,
dangerous pickle), 2 bad usage or unreadable input.`,
		Example: `  vramguard ckpt ls runs/exp1                 # every checkpoint, newest first
  vramguard ckpt inspect last.pt --json        # tensors, scalars, resume memory
  vramguard ckpt verify --deep last.pt         # CRC of every record
  python train.py --resume "$(vramguard ckpt latest runs/exp1)"
  vramguard ckpt prune runs/exp1 --keep-last 3 --keep-best 1 --metric val_loss --mode min
  vramguard ckpt scan downloaded.bin           # refuse pickles that run code`,
	}
	cmd.AddCommand(newCmdCkptLs(f), newCmdCkptInspect(f), newCmdCkptVerify(f), newCmdCkptLatest(f),
		newCmdCkptPrune(f), newCmdCkptScan(f))
	return cmd
}

// ExitNotUnderstood is ckpt scan's status when nothing failed but some
// content a loader could unpickle is in a form the scanner does not read:
// neither a pass nor a proven danger.
const ExitNotUnderstood = 4

// unreadable maps an input error to exit 2.
func ckptInputErr(err error) error {
	var ue *ckpt.UnreadableError
	if errors.As(err, &ue) {
		return &ExitError{Code: ExitUsage, Err: err}
	}
	return err
}

func newCmdCkptLs(f *Factory) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls DIR [--json]",
		Short: "List every checkpoint under DIR, newest first",
		Long: `ls lists every checkpoint under DIR (up to 6 levels deep), newest first: by
step or epoch when every checkpoint records it, else by modification time.
Each line shows the format, size, time, step/epoch, metric scalars found in
the checkpoint (loss, accuracy, ...) and whether its structure is sound.
Files in a checkpoint format that hold no model weights (a config, a
vocabulary, training arguments, optimizer state alone) come last, marked
"not a checkpoint" with the reason; latest and prune never act on them.
Only metadata is read.`,
		Example: `  vramguard ckpt ls runs/exp1
  vramguard ckpt ls runs/ --json | jq -r '.[] | select(.valid|not) | .path'`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			es, err := ckpt.Scan(args[0])
			if err != nil {
				return ckptInputErr(err)
			}
			if asJSON {
				es = emptyIfNil(es)
				return f.WriteJSON(es)
			}
			renderEntries(f, es)
			for _, m := range ckpt.MixedRuns(es) {
				fmt.Fprintf(f.IO.ErrOut, "vramguard: %s\n", termsafe.String(m))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print entries as JSON")
	return cmd
}

func newCmdCkptInspect(f *Factory) *cobra.Command {
	var asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:   "inspect FILE|DIR [--json]",
		Short: "Show a checkpoint's tensors, scalars, size and the GPU memory a resume needs",
		Long: `inspect reports a checkpoint's format, tensors (path, dtype, shape, bytes),
scalars (every int, float, string and bool in the object: epoch, step, loss,
metrics, hyper-parameters), total tensor bytes and unique storage bytes
(views and tied weights count once), parameter count, an estimate of the GPU
memory a resume needs (parameters, gradients, optimizer state), the Python
globals the pickle references and any findings. It reads the zip directory
and the pickle, not the tensors. Exit 1 when the checkpoint is invalid.

Paths join dict keys and sequence indexes with "."; dtypes are torch's names.`,
		Example: `  vramguard ckpt inspect last.pt
  vramguard ckpt inspect last.pt --json | jq '.scalars.epoch'
  vramguard ckpt inspect runs/checkpoint-500          # HF Trainer directory`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			rep, err := ckpt.Inspect(args[0], ckpt.Options{Structure: true})
			if err != nil {
				return ckptInputErr(err)
			}
			if asJSON {
				if err := f.WriteJSON(rep); err != nil {
					return err
				}
			} else {
				renderReport(f, rep, limit)
			}
			if !rep.Valid {
				return Silent(ExitFailed)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().IntVar(&limit, "limit", 40, "tensors and scalars to show (0 for all); --json shows all")
	return cmd
}

func newCmdCkptVerify(f *Factory) *cobra.Command {
	var deep, asJSON bool
	cmd := &cobra.Command{
		Use:   "verify FILE|DIR [--deep] [--json]",
		Short: "Check a checkpoint's structure, and with --deep the CRC of every record",
		Long: `verify checks structure: the zip central directory, one root folder, every
storage record present with the size the pickle implies, view bounds,
safetensors offsets against the file length, the DCP .metadata commit
marker, HF trainer_state.json. --deep also reads every byte: the CRC-32 of
every zip record, every storage of a legacy file, every safetensors byte
range and DCP item, with a progress bar on stderr when it is a terminal.

DIR may be a checkpoint directory (DCP, HF) or a directory of checkpoints,
in which case every checkpoint under it is verified.

Exit status: 0 valid, 1 invalid (with the reason), 2 unreadable input.`,
		Example: `  vramguard ckpt verify last.pt && cp last.pt /backup/
  vramguard ckpt verify --deep runs/exp1`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return runCkptVerify(f, args[0], deep, asJSON)
		},
	}
	cmd.Flags().BoolVar(&deep, "deep", false, "read every byte and check CRCs")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print results as JSON")
	return cmd
}

type verifyResult struct {
	Path   string `json:"path"`
	Format string `json:"format"`
	Valid  bool   `json:"valid"`
	Reason string `json:"reason,omitempty"`
	// Incomplete: what a sound checkpoint lacks for a resume (HF's
	// optimizer.pt).
	Incomplete string `json:"incomplete,omitempty"`
}

func runCkptVerify(f *Factory, path string, deep, asJSON bool) error {
	st, err := os.Stat(path)
	if err != nil {
		return ckptInputErr(ckpt.Unreadable(err))
	}
	var paths []string
	if st.IsDir() {
		rep, err := ckpt.Inspect(path, ckpt.Options{Structure: true})
		if err != nil {
			return ckptInputErr(err)
		}
		if rep.Format != "" {
			paths = []string{path}
		} else {
			es, err := ckpt.Scan(path)
			if err != nil {
				return ckptInputErr(err)
			}
			if len(es) == 0 {
				return Failf("no checkpoint under %s", path)
			}
			for _, e := range es {
				paths = append(paths, e.Path)
			}
		}
	} else {
		paths = []string{path}
	}
	var results []verifyResult
	bad := 0
	for _, p := range paths {
		opt := ckpt.Options{Deep: deep, Structure: true}
		var bar *progressBar
		if deep {
			bar = newProgressBar(f, p)
			if bar != nil {
				opt.Progress = bar.add
			}
		}
		rep, err := ckpt.Inspect(p, opt)
		bar.done()
		if err != nil {
			return ckptInputErr(err)
		}
		results = append(results, verifyResult{Path: p, Format: rep.Format, Valid: rep.Valid, Reason: rep.Reason, Incomplete: rep.Incomplete})
		if !rep.Valid {
			bad++
		}
	}
	if asJSON {
		if err := f.WriteJSON(results); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			if r.Valid {
				fmt.Fprintf(f.IO.Out, "ok       %s (%s)\n", ckpt.DisplayPath(r.Path), r.Format)
				if r.Incomplete != "" {
					fmt.Fprintf(f.IO.Out, "         %s\n", termsafe.String(r.Incomplete))
				}
			} else {
				format := r.Format
				if format == "" {
					format = "unknown format"
				}
				fmt.Fprintf(f.IO.Out, "INVALID  %s (%s): %s\n", ckpt.DisplayPath(r.Path), format, termsafe.String(r.Reason))
			}
		}
	}
	if bad > 0 {
		return Silent(ExitFailed)
	}
	return nil
}

func newCmdCkptLatest(f *Factory) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "latest DIR",
		Short: "Print the path of the newest valid checkpoint under DIR",
		Long: `latest prints the path of the newest valid checkpoint under DIR: by step or
epoch when the checkpoints record it, else by modification time. A
checkpoint is recognised by what it holds (model weights; a DCP or HF
Trainer checkpoint directory), never by its name: configs, vocabularies,
training arguments and optimizer state alone are never picked (--json lists
them under not_checkpoints). Step and epoch come from top-level keys only.
Newer checkpoints that are invalid (a torn torch.save, a truncated copy)
are skipped and named on stderr; the one picked passes the full CRC check
of its records first (a damaged one is skipped with the reason). After a
Lightning restart in the same folder (-vN files) the newest run's
checkpoint is taken, and a disagreement with an earlier run's higher step
is said on stderr. A symlinked DIR is followed. Exit 1 when
there is no valid checkpoint, so a resume line can fall back to starting
fresh; when checkpoints were saved but none is valid, every one is named
with its reason.`,
		Example: `  python train.py ${CKPT:+--resume "$CKPT"}   # with CKPT=$(vramguard ckpt latest runs/exp1)
  if ckpt=$(vramguard ckpt latest runs/exp1); then python train.py --resume "$ckpt"; else python train.py; fi`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			res, err := ckpt.FindLatest(args[0])
			if err != nil {
				return ckptInputErr(err)
			}
			if asJSON {
				if err := f.WriteJSON(res); err != nil {
					return err
				}
			} else {
				renderLatest(f, res)
			}
			if res.Best == nil {
				if asJSON {
					return Silent(ExitFailed)
				}
				var nv *ckpt.NoValidCheckpointError
				if errors.As(res.Problem(), &nv) && nv.LFSPointers() == len(nv.Invalid) {
					return Failf("%v", nv)
				}
				if res.Problem() != nil {
					return Failf("no valid checkpoint under %s: %d saved, every one failed verification (above)", args[0], len(res.Invalid))
				}
				return Failf("no valid checkpoint under %s", args[0])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the choice and the skipped entries as JSON")
	return cmd
}

func newCmdCkptPrune(f *Factory) *cobra.Command {
	var pol ckpt.PrunePolicy
	var apply, asJSON bool
	cmd := &cobra.Command{
		Use:   "prune DIR --keep-last N [--keep-best K --metric NAME --mode min|max] [--keep-every N] [--apply]",
		Short: "Delete old checkpoints by a retention policy (dry run unless --apply)",
		Long: `prune plans which checkpoints under DIR to delete and, with --apply, deletes
them. Without --apply nothing is touched.

Only checkpoints are ever deleted, recognised by what they hold (model
weights; a DCP or HF Trainer checkpoint directory), never by name: configs,
vocabularies, training arguments, optimizer state alone, shards of a
sharded model and files in no checkpoint format are left alone, and the
report lists them with the reason. The policy applies within each series
of checkpoints (same directory, same name with the step number abstracted:
ckpt-100.pt, ckpt-200.pt), so a checkpoint is only deleted in favour of
newer ones of its own series.

In each series it never deletes the newest valid checkpoint, the best one
by --metric, or anything newer than the newest valid one; a series with no
valid checkpoint is kept whole. Invalid checkpoints of a series older than
its newest valid one are deleted unless a rule keeps them. The report names
the rule that keeps each checkpoint and the space the deletions free.

It also keeps the target of any link it keeps (best.pt, last.ckpt), the
checkpoint a trainer recorded as its best (HF best_model_checkpoint,
Lightning best_model_path; --delete-recorded-best lifts that), and model
sizes apart (resnet18.pt and
resnet50.pt are no series unless step or epoch prove it). The checkpoint
kept as a series' newest valid one passes the full CRC check first.
--apply checks every deletion before the first; one that fails later is
reported with what was already deleted.`,
		Example: `  vramguard ckpt prune runs/exp1 --keep-last 3
  vramguard ckpt prune runs/exp1 --keep-last 2 --keep-best 1 --metric val_loss --mode min --apply
  vramguard ckpt prune runs/exp1 --keep-last 1 --keep-every 1000 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if !c.Flags().Changed("keep-last") && !c.Flags().Changed("keep-best") && !c.Flags().Changed("keep-every") {
				return Usagef("say what to keep: --keep-last N, --keep-best K --metric NAME, or --keep-every N")
			}
			if pol.Metric != "" && pol.Mode == "" {
				return Usagef("--metric needs --mode min or --mode max")
			}
			if err := pol.Validate(); err != nil {
				return Usagef("%v", err)
			}
			plan, err := ckpt.Prune(args[0], pol, apply)
			if err != nil {
				if plan == nil {
					return ckptInputErr(err)
				}
				if asJSON && plan.Applied {
					// Scripts learn what is gone from the plan's deleted list.
					f.WriteJSON(plan)
				}
				return Failf("%s", termsafe.String(err.Error()))
			}
			if asJSON {
				return f.WriteJSON(plan)
			}
			renderPlan(f, plan)
			for _, m := range plan.MixedRuns {
				fmt.Fprintf(f.IO.ErrOut, "vramguard: %s: each run is pruned on its own\n", termsafe.String(m))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&pol.KeepLast, "keep-last", 0, "keep the N newest valid checkpoints")
	fl.IntVar(&pol.KeepBest, "keep-best", 0, "keep the K best checkpoints by --metric")
	fl.StringVar(&pol.Metric, "metric", "", "scalar that ranks checkpoints (loss, val_acc, eval_loss, ...)")
	fl.StringVar(&pol.Mode, "mode", "", "min or max: which way --metric is better")
	fl.IntVar(&pol.KeepEvery, "keep-every", 0, "keep checkpoints whose step (else epoch) is a multiple of N")
	fl.BoolVar(&pol.DeleteRecordedBest, "delete-recorded-best", false, "let the policy delete the checkpoint a trainer recorded as its best (HF best_model_checkpoint, Lightning best_model_path)")
	fl.BoolVar(&apply, "apply", false, "delete; without it prune only reports")
	fl.BoolVar(&asJSON, "json", false, "print the plan as JSON")
	return cmd
}

func newCmdCkptScan(f *Factory) *cobra.Command {
	var asJSON, strict bool
	var allow []string
	cmd := &cobra.Command{
		Use:   "scan FILE|DIR [--allow MODULE.QUALNAME]... [--strict] [--json]",
		Short: "Fail unless every pickle global a checkpoint references is known to be safe",
		Long: `scan lists every Python global a checkpoint's pickles reference, without
running them, and passes a file only when every one is on an allowlist:
PyTorch's weights-only unpickler allowlist plus known-safe framework names
(collections, numpy array reconstruction, the nn.Module classes torch.nn
defines). Names are resolved the way Python's find_class resolves them
(Python 2 renames, dotted names walked with getattr).

It fails (exit 1) on anything else: a dangerous global (os, subprocess,
builtins eval/exec/getattr/__import__/open, runpy, importlib, a resolver
such as torch._utils._import_dotted_name, ...), an unknown one (your own
classes: torch.load would import and call them; accept them with --allow),
a reference that cannot be resolved without running the pickle, a BUILD
on anything but a plain data container or torch.nn module, a persistent id
other than torch's storage records (a legacy-format whole-model save's
module records are unknown until --allow names their classes), and a
pickle the scanner cannot read to its end.

Between the allowlist and unknown lies one tier of its own, shown as
"ok (framework classes, no code run)" and passed: a class of a known
framework (PyTorch, Lightning, Hugging Face Transformers, Accelerate, PEFT,
argparse) that the pickle only references, never calls, BUILDs or hands to
anything that may call it (Lightning 2.x's optimizer class in
hyper_parameters, Lightning 1.x's callback classes as dict keys), or one of
their plain data classes built as real saves build it (HF's
TrainingArguments and its enums in training_args.bin, argparse.Namespace).
torch.load imports the framework's module and runs no code from the file.
--strict fails that tier too (exit 1).

Content it does not understand (a file in no format it reads, a .npy
header it cannot parse) is neither: "NOT UNDERSTOOD", exit 4 when nothing
failed. In a directory, files no loader unpickles (their first byte is no
pickle opcode and they are in no format it reads: JSON, text) are listed as
skipped, with the reason, and do not change the exit status; a
subdirectory or file it cannot read, or one past the 64-level walk limit,
is a finding.

Every file is scanned whatever its name or extension, every pickle in it
(also a second pickle after the first STOP), numpy's .npy and every .npz
member as numpy.load(allow_pickle=True) reads them, pickles compressed
with gzip, bzip2, zlib, xz or zstd (every member, stream or frame; at most
64 MiB decompressed, more is a finding), and zip records even when their
CRC is bad or the central directory is missing.

Exit status: 0 every file understood and clean, 1 a finding (dangerous,
unknown global, pickle not read to its end), 2 bad usage or unreadable
input, 4 nothing failed but something was not understood.`,
		Example: `  vramguard ckpt scan downloaded/pytorch_model.bin
  vramguard ckpt scan whole_model.pt --allow __main__.Net --allow mypkg.layers.Block
  vramguard ckpt scan ~/models --json | jq '.[] | select(.status != "ok" and .status != "skipped") | .path'`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			for _, a := range allow {
				if err := ckpt.CheckAllowName(a); err != nil {
					return Usagef("--allow: %v", err)
				}
			}
			results, err := ckpt.ScanPathWith(args[0], ckpt.ScanOptions{Allow: allow, Strict: strict})
			if err != nil {
				return ckptInputErr(err)
			}
			failed, notUnderstood := 0, 0
			for _, r := range results {
				switch r.Status {
				case ckpt.StatusOK, ckpt.StatusSkipped:
				case ckpt.StatusFramework:
					if strict {
						failed++
					}
				case ckpt.StatusNotUnderstood:
					notUnderstood++
				default:
					failed++
				}
			}
			if asJSON {
				if results == nil {
					results = []*ckpt.ScanResult{}
				}
				if err := f.WriteJSON(results); err != nil {
					return err
				}
			} else {
				renderScan(f, results)
			}
			switch {
			case failed > 0:
				return Silent(ExitFailed)
			case notUnderstood > 0:
				return Silent(ExitNotUnderstood)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print results as JSON")
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "also accept this global, by its full dotted path (module.qualname); repeatable")
	cmd.Flags().BoolVar(&strict, "strict", false, "fail framework classes too (referenced only, or plain data classes): pass only the allowlist and --allow")
	return cmd
}

func sortedScalarKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		di, dj := strings.Count(ks[i], "."), strings.Count(ks[j], ".")
		if di != dj {
			return di < dj
		}
		return ks[i] < ks[j]
	})
	return ks
}
