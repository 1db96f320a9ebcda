package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Version is the release this binary is, stamped at build time:
//
//	go build -ldflags "-X github.com/vramguard/vramguard/internal/cli.Version=v1.2.3" ./cmd/vramguard
//
// Unstamped, it is the module version Go recorded (a `go install
// ...@v1.2.3` build), or "dev".
var Version = ""

// versionInfo is what `vramguard version --json` prints.
type versionInfo struct {
	Version string `json:"version"`
	// Module and ModuleVersion are what Go recorded of the main module;
	// ModuleVersion is "(devel)" for a build from a checkout.
	Module        string `json:"module"`
	ModuleVersion string `json:"module_version"`
	// Revision, RevisionTime and Modified come from the version control
	// checkout the binary was built in; empty when it was built outside
	// one (or with -buildvcs=false).
	Revision     string `json:"revision"`
	RevisionTime string `json:"revision_time"`
	Modified     bool   `json:"modified"`
	Go           string `json:"go"`
	Platform     string `json:"platform"`
}

// buildVersion combines the stamped Version with the build info Go
// embedded (nil when there is none).
func buildVersion(stamped string, bi *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: stamped, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		v.Module, v.ModuleVersion = bi.Main.Path, bi.Main.Version
		if bi.GoVersion != "" {
			v.Go = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.RevisionTime = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Version == "" {
		v.Version = "dev"
		if mv := v.ModuleVersion; mv != "" && mv != "(devel)" {
			v.Version = mv
		}
	}
	return v
}

// currentVersion is this binary's version information.
func currentVersion() versionInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return buildVersion(Version, bi)
}

// short is the one line --version prints: the version and, when known,
// the revision.
func (v versionInfo) short() string {
	s := v.Version
	if v.Revision != "" {
		rev := v.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if v.Modified {
			rev += ", modified"
		}
		s += " (" + rev + ")"
	}
	return s
}

// NewCmdVersion builds `vramguard version`.
func NewCmdVersion(f *Factory) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print vramguard's version, the revision it was built from, and its Go version",
		Long: `Print the release (stamped at build time, else the module version Go recorded,
else "dev"), the version control revision the binary was built from, whether the
checkout had uncommitted changes, and the Go version and platform. --json prints
one object: {version, module, module_version, revision, revision_time, modified,
go, platform}.`,
		Example: `  vramguard version
  vramguard version --json | jq -r .revision`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := currentVersion()
			if asJSON {
				return f.WriteJSON(v)
			}
			var b strings.Builder
			fmt.Fprintf(&b, "vramguard %s\n", v.Version)
			switch {
			case v.Revision == "":
				fmt.Fprintln(&b, "revision  unknown (the build recorded none: built outside a git checkout, or with -buildvcs=false)")
			default:
				fmt.Fprintf(&b, "revision  %s", v.Revision)
				if v.RevisionTime != "" {
					fmt.Fprintf(&b, " (%s)", v.RevisionTime)
				}
				if v.Modified {
					fmt.Fprint(&b, ", with uncommitted changes")
				}
				fmt.Fprintln(&b)
			}
			fmt.Fprintf(&b, "go        %s %s\n", v.Go, v.Platform)
			_, err := fmt.Fprint(f.IO.Out, b.String())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}
