package cli

import (
	"errors"
	"strings"

	"github.com/vramguard/vramguard/internal/groups"
	"github.com/vramguard/vramguard/internal/termsafe"
)

// explainGroup prints the story of group from its ranks' records.
func explainGroup(f *Factory, group string, asJSON bool) error {
	group = strings.TrimSpace(group)
	if group == "" {
		return Usagef("--group: give the job's group (its Slurm job id, or run --group's name)")
	}
	g, err := groups.Dir(f.GroupDir()).Story(group)
	if errors.Is(err, groups.ErrNoGroup) {
		return Usagef("%v: no run of it recorded its ranks there (set VRAMGUARD_GROUP_DIR to the directory its nodes share)", err)
	}
	if err != nil {
		return Envf("%v", err)
	}
	if asJSON {
		return f.WriteJSON(g)
	}
	// the ranks wrote their last lines: show escapes, never obey them
	groups.Render(termsafe.Writer(f.IO.Out), g)
	return nil
}
