package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/vramguard/vramguard/internal/cli"
)

// cmdDocs writes, from vramguard's own command tree, a man page per
// command (man1/vramguard-run.1, ...) and the bash, zsh and fish
// completion scripts: the same scripts `vramguard completion SHELL`
// prints, so the packages need not run the binary (an arm64 one cannot
// run here).
func cmdDocs(args []string) error {
	fs := flag.NewFlagSet("docs", flag.ContinueOnError)
	version := fs.String("version", "", "the version the pages name")
	out := fs.String("out", "", "directory for man1/ and completions/")
	if err := parseFlags(fs, args, "version", "out"); err != nil {
		return err
	}
	date, err := sourceDate()
	if err != nil {
		return err
	}
	root := cli.NewCmdRoot(cli.NewFactory())
	root.InitDefaultCompletionCmd()
	walk(root, func(c *cobra.Command) { c.DisableAutoGenTag = true })

	man := filepath.Join(*out, "man1")
	if err := os.MkdirAll(man, 0o755); err != nil {
		return err
	}
	if err := doc.GenManTree(root, &doc.GenManHeader{
		Section: "1",
		Date:    &date,
		Source:  "vramguard " + *version,
		Manual:  "vramguard manual",
	}, man); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}

	comp := filepath.Join(*out, "completions")
	if err := os.MkdirAll(comp, 0o755); err != nil {
		return err
	}
	for name, gen := range map[string]func(*bytes.Buffer) error{
		"vramguard.bash": func(b *bytes.Buffer) error { return root.GenBashCompletionV2(b, true) },
		"_vramguard":     func(b *bytes.Buffer) error { return root.GenZshCompletion(b) },
		"vramguard.fish": func(b *bytes.Buffer) error { return root.GenFishCompletion(b, true) },
	} {
		var b bytes.Buffer
		if err := gen(&b); err != nil {
			return fmt.Errorf("completion %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(comp, name), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walk(sub, fn)
	}
}
