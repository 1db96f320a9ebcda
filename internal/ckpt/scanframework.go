package ckpt

import (
	"fmt"
	"strings"

	"github.com/vramguard/vramguard/internal/pickle"
)

// VerdictFramework is the scan's tier between the allowlist and unknown: a
// class of a known framework that torch.load imports but runs no code of
// the file's with. Either the pickle only references it (Lightning 2.x
// keeps the optimizer class in hyper_parameters, Lightning 1.x keys its
// callbacks' states by their class) or it is one of the framework's plain
// data classes built the plain way (HF's TrainingArguments and its enums
// in training_args.bin, argparse.Namespace in hyper_parameters). It passes
// unless ScanOptions.Strict.
const VerdictFramework = "framework"

// referenceModules: a class of these packages that a pickle only
// references (never calls, never BUILDs, never hands to anything that may
// call it) costs torch.load the import of an installed framework module,
// nothing more.
var referenceModules = []string{
	"torch", "torchvision", "torchaudio", "torchtext",
	"pytorch_lightning", "lightning", "lightning_fabric",
	"transformers", "accelerate", "peft", "argparse",
}

// dataClasses are known frameworks' plain data classes, each with the one
// way real saves build it:
//   - shapeNew: NEWOBJ with no arguments (cls.__new__(cls), no __init__),
//     then at most one BUILD with a dict (the instance's attributes);
//   - shapeEnum: REDUCE with one str or int argument (the Enum member
//     lookup by value), nothing else.
var dataClasses = map[string]callShape{
	"argparse.Namespace":                                          shapeNew,
	"transformers.training_args.TrainingArguments":                shapeNew,
	"transformers.training_args_seq2seq.Seq2SeqTrainingArguments": shapeNew,
	"transformers.trainer_pt_utils.AcceleratorConfig":             shapeNew,
	"accelerate.state.PartialState":                               shapeNew,
	"transformers.trainer_utils.IntervalStrategy":                 shapeEnum,
	"transformers.trainer_utils.SaveStrategy":                     shapeEnum,
	"transformers.trainer_utils.SchedulerType":                    shapeEnum,
	"transformers.trainer_utils.HubStrategy":                      shapeEnum,
	"transformers.trainer_utils.FSDPOption":                       shapeEnum,
	"transformers.training_args.OptimizerNames":                   shapeEnum,
	"transformers.debug_utils.DebugOption":                        shapeEnum,
	"accelerate.utils.dataclasses.DistributedType":                shapeEnum,
	"accelerate.utils.dataclasses.DynamoBackend":                  shapeEnum,
	"accelerate.utils.dataclasses.PrecisionType":                  shapeEnum,
}

type callShape int

const (
	shapeNone callShape = iota
	shapeNew
	shapeEnum
)

// storingCalls keep what they are given as data and call none of it.
var storingCalls = map[string]bool{
	"collections.OrderedDict": true,
}

// useWalkBudget bounds the walk over what calls are handed; past it no
// global gets the framework tier (they stay unknown).
const useWalkBudget = 5_000_000

// frameworkUses decides, for one decoded pickle, which of its unknown
// globals (by index in pr.Globals) get the framework tier, and why. A
// global qualifies when its module is a known framework's and every use of
// it in the pickle is inert: it is never the target of a BUILD, never
// appears in what is handed to a call other than a storing container (an
// OrderedDict) or a data class's attributes, nor in a persistent id; and
// it is called only when it is a known data class called its plain way.
func frameworkUses(pr *pickle.Result, unknown []int) map[int]string {
	if len(unknown) == 0 {
		return nil
	}
	cand := map[pickle.Global]bool{}
	for _, i := range unknown {
		g := pr.Globals[i].Global
		if _, ok := dataClasses[g.String()]; ok || referenceable(g) {
			cand[g] = true
		}
	}
	if len(cand) == 0 {
		return nil
	}
	denied := map[pickle.Global]string{}
	called := map[pickle.Global]int{}
	for _, b := range pr.Builds {
		if g, ok := b.Target.(pickle.Global); ok && cand[g] {
			denied[g] = "a BUILD sets attributes on the class itself"
		}
	}
	// What is handed to a call that may call it, or to persistent_load.
	w := &useWalk{cand: cand, found: map[pickle.Global]bool{}, seen: map[any]bool{}, budget: useWalkBudget}
	for _, cr := range pr.Calls {
		c := cr.Call
		fn, isGlobal := c.Func.(pickle.Global)
		if isGlobal && cand[fn] {
			called[fn]++
			if why := plainCall(fn, c); why != "" {
				denied[fn] = why
			}
		}
		switch {
		case isGlobal && storingCalls[fn.String()]:
			continue
		case isGlobal && dataClasses[fn.String()] == shapeNew && cand[fn]:
			continue // its state is stored as attributes (plainCall checked it)
		}
		w.values(c.Args)
		if c.Kwargs != nil {
			w.value(c.Kwargs)
		}
		w.value(c.State)
		w.values(c.ListItems)
		if c.DictItems != nil {
			w.value(c.DictItems)
		}
		if !isGlobal {
			w.value(c.Func) // the callee is itself a computed value
		}
	}
	for _, p := range pr.PersIDList {
		w.value(p.ID)
	}
	out := map[int]string{}
	for _, i := range unknown {
		g := pr.Globals[i].Global
		switch {
		case !cand[g] || w.over:
		case denied[g] != "":
		case w.found[g]:
		case called[g] > 0:
			out[i] = fmt.Sprintf("a plain data class of %s, built as real saves build it (%s); torch.load imports %s and runs no code from the file (--strict fails it)",
				frameworkOf(g.Module), shapeWords(dataClasses[g.String()]), g.Module)
		default:
			out[i] = fmt.Sprintf("a class of %s the pickle only references (never calls or builds); torch.load imports %s and runs no code from the file (--strict fails it)",
				frameworkOf(g.Module), g.Module)
		}
	}
	return out
}

// plainCall says why a call of the data class g is not its plain way ("" when it is).
func plainCall(g pickle.Global, c *pickle.Call) string {
	switch dataClasses[g.String()] {
	case shapeNew:
		if !c.New || len(c.Args) != 0 || c.Kwargs != nil || len(c.ListItems) > 0 || c.DictItems != nil {
			return "called other than as cls.__new__(cls)"
		}
		if c.HasState {
			if _, ok := c.State.(*pickle.Dict); !ok {
				return "its state is not a dict of attributes"
			}
		}
		return ""
	case shapeEnum:
		if c.New || len(c.Args) != 1 || c.Kwargs != nil || c.HasState || len(c.ListItems) > 0 || c.DictItems != nil {
			return "called other than as an Enum lookup by value"
		}
		switch c.Args[0].(type) {
		case string, int64:
			return ""
		}
		return "called with a value that is no str or int"
	}
	return "called (torch.load would run its code)"
}

func shapeWords(s callShape) string {
	if s == shapeEnum {
		return "an Enum member looked up by value"
	}
	return "cls.__new__ and its attributes set"
}

// notReferenceModules are framework modules whose import does more than
// define names (test harnesses that read sys.argv, benchmark and
// profiling entry points): a class of theirs gets no tier.
var notReferenceModules = []string{"torch.testing", "torch.utils.benchmark", "torch.utils.bottleneck", "torch.distributed.run",
	"torch.distributed.launch", "torch.distributed.elastic", "lightning.app", "transformers.commands", "accelerate.commands"}

// referenceable: g is a public name of a public module of a known
// framework (no component starting with "_": no private module, no
// __main__), whose import only defines names.
func referenceable(g pickle.Global) bool {
	if !inModules(g.Module, referenceModules) || inModules(g.Module, notReferenceModules) || strings.HasPrefix(g.Name, "_") {
		return false
	}
	for _, p := range strings.Split(g.Module, ".") {
		if p == "" || strings.HasPrefix(p, "_") {
			return false
		}
	}
	return true
}

func inModules(module string, mods []string) bool {
	for _, m := range mods {
		if module == m || strings.HasPrefix(module, m+".") {
			return true
		}
	}
	return false
}

func frameworkOf(module string) string {
	top, _, _ := strings.Cut(module, ".")
	switch top {
	case "torch", "torchvision", "torchaudio", "torchtext":
		return "PyTorch"
	case "pytorch_lightning", "lightning", "lightning_fabric":
		return "Lightning"
	case "transformers":
		return "Hugging Face Transformers"
	case "accelerate":
		return "Hugging Face Accelerate"
	case "peft":
		return "Hugging Face PEFT"
	case "argparse":
		return "Python's argparse"
	}
	return top
}

// useWalk finds candidate globals in values, each container once.
type useWalk struct {
	cand   map[pickle.Global]bool
	found  map[pickle.Global]bool
	seen   map[any]bool
	budget int
	over   bool
}

func (w *useWalk) values(vs []any) {
	for _, v := range vs {
		w.value(v)
	}
}

func (w *useWalk) value(v any) {
	stack := []any{v}
	for len(stack) > 0 && !w.over {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if w.budget--; w.budget < 0 {
			w.over = true
			return
		}
		switch x := v.(type) {
		case pickle.Global:
			if w.cand[x] {
				w.found[x] = true
			}
		case pickle.Tuple:
			stack = append(stack, x...)
		case pickle.PersID:
			stack = append(stack, x.ID)
		case *pickle.List, *pickle.Dict, *pickle.Set, *pickle.Call:
			if w.seen[x] {
				continue
			}
			w.seen[x] = true
			switch x := x.(type) {
			case *pickle.List:
				stack = append(stack, x.Items...)
			case *pickle.Dict:
				for i := range x.Len() {
					stack = append(stack, x.Key(i), x.Val(i))
				}
			case *pickle.Set:
				stack = append(stack, x.Items...)
			case *pickle.Call:
				stack = append(stack, x.Func)
				stack = append(stack, x.Args...)
				if x.Kwargs != nil {
					stack = append(stack, x.Kwargs)
				}
				stack = append(stack, x.State)
				stack = append(stack, x.ListItems...)
				if x.DictItems != nil {
					stack = append(stack, x.DictItems)
				}
			}
		}
	}
}
