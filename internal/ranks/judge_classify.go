// How each rank ended on its own evidence, before any other rank is weighed.

package ranks

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/vramguard/vramguard/internal/diagnose"
	"github.com/vramguard/vramguard/internal/units"
)

// failureWord is Rank.Failure for k ("" for a rank not seen to end).
func failureWord(k kind) string {
	switch k {
	case kindOK:
		return FailureOK
	case kindOwn:
		return FailureOwn
	case kindExternal:
		return FailureExternal
	case kindConsequence:
		return FailureConsequence
	case kindUnknown:
		return FailureUnknown
	}
	return ""
}

// classify reads one rank's own evidence: the lines that are its, what the
// probe and torchrun's error file say, and how it ended.
func classify(r *rankState, j Job) {
	p := &r.p
	in := diagnose.Input{ExitCode: 0}
	if p.Exit != nil {
		in.ExitCode, in.Signal = p.Exit.Code, p.Exit.Signal
	}
	for _, l := range r.lines {
		in.Tail = append(in.Tail, l.Text)
	}
	for _, rep := range []*Report{p.ErrorFile, p.Exception} {
		if rep != nil && rep.Text != "" && !inLines(r.lines, rep.Text) {
			in.Tail = append(in.Tail, rep.Text)
		}
	}
	if p.OOMKill != "" {
		in.KernelOOM = []string{p.OOMKill}
	} else if r.victim {
		in.OOMKills = 1
	}
	reading := diagnose.Read(in.Tail)
	r.dec, r.hasDec = reading.Decisive()
	r.v = diagnose.Classify(in)
	if (r.victim || p.OOMKill != "") && p.PeakHost > 0 {
		s := "the highest resident memory seen of this process: " + units.FormatBytes(p.PeakHost)
		if l := j.Input.Limit; l > 0 && j.Input.LimitSource != "host" {
			s += fmt.Sprintf("; the job's memory limit: %s (%s)", units.FormatBytes(l), j.Input.LimitSource)
			if j.Input.LimitPeak > 0 {
				s += fmt.Sprintf(", whose charge peaked at %s", units.FormatBytes(j.Input.LimitPeak))
			}
		}
		r.v.Evidence = append(r.v.Evidence, s)
	}
	if r.victim {
		r.v.Evidence = append(r.v.Evidence, "no kernel line named the OOM killer's victim (the kernel log was not readable, or said nothing): this rank was the first process of the job to die of SIGKILL, so it is taken for it")
	}
	r.t = p.Ended
	if !p.Closed.IsZero() && (r.t.IsZero() || p.Closed.Before(r.t)) {
		r.t = p.Closed
	}
	for _, rep := range []*Report{p.Exception, p.ErrorFile} {
		if rep != nil && !rep.T.IsZero() && (r.t.IsZero() || rep.T.Before(r.t)) {
			r.t = rep.T
		}
	}
	crash := p.Exit != nil && (p.Exit.Signal == syscall.SIGSEGV || p.Exit.Signal == syscall.SIGBUS || p.Exit.Signal == syscall.SIGABRT ||
		p.Exit.Signal == syscall.SIGILL || p.Exit.Signal == syscall.SIGFPE)
	external := p.Exit != nil && (p.Exit.Signal == syscall.SIGTERM || p.Exit.Signal == syscall.SIGINT || p.Exit.Signal == syscall.SIGHUP ||
		p.Exit.Signal == syscall.SIGQUIT || p.Exit.Signal == syscall.SIGKILL)
	switch {
	case r.v.Reason == diagnose.HostOOMKilled || crash:
		r.kind = kindOwn
	case r.hasDec && r.dec.Role == diagnose.Consequence:
		r.kind = kindConsequence
	case r.hasDec && (r.dec.Role == diagnose.Cause || (r.dec.Role == diagnose.Hint && !external)):
		r.kind = kindOwn
	case external:
		r.kind = kindExternal
	case r.v.Reason == diagnose.PythonException:
		r.kind = kindOwn
	case p.Exit != nil && p.Exit.Status() == 0:
		r.kind = kindOK
	case p.Exit != nil:
		r.kind = kindUnknown
	case !p.Ended.IsZero():
		// it ended, its status unread (another parent reaped it at once,
		// on a kernel that keeps no status for a pidfd)
		r.kind = kindUnknown
		r.v = diagnose.Verdict{Reason: diagnose.ExitError, ExitCode: -1,
			Summary:  "it ended, printing no error, and its exit status could not be read",
			Evidence: []string{"its exit status could not be read: its launcher reaped it at once, and this kernel keeps no exit status for a pidfd (Linux 6.15 does)"},
			Advice:   []string{"Read the end of the log (`vramguard logs RUN`) for the job's own error message."}}
	default:
		r.kind = kindNone
	}
}

// signalNamed is the signal called name ("SIGKILL"), 0 when unknown.
func signalNamed(name string) syscall.Signal {
	for s := syscall.Signal(1); s < 65; s++ {
		if diagnose.SignalName(s) == name {
			return s
		}
	}
	return 0
}

func inLines(lines []diagnose.Line, text string) bool {
	text = strings.TrimSpace(text)
	for _, l := range lines {
		if strings.TrimSpace(l.Text) == text {
			return true
		}
	}
	return false
}
