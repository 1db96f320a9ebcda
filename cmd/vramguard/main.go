// Command vramguard supervises GPU training jobs, explains their deaths, watches
// GPU memory machine-wide and manages checkpoints. See README.md.
package main

import (
	"os"

	"github.com/vramguard/vramguard/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
