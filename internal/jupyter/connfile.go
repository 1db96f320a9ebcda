package jupyter

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/vramguard/vramguard/internal/attrib"
)

// maxConnectionFile bounds what is read of a connection file: Jupyter's are
// a few hundred bytes, and the path comes from a command line.
const maxConnectionFile = 64 << 10

// Connection is what identifies a kernel in its connection file.
type Connection struct {
	Key       string `json:"key"`
	Transport string `json:"transport"`
	ShellPort int    `json:"shell_port"`
}

// ReadConnection reads a connection file (at most 64 KiB of it) and checks
// that it is one: a JSON object with a transport and a shell port.
func ReadConnection(file string) (Connection, error) {
	f, err := os.Open(file)
	if err != nil {
		return Connection{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConnectionFile+1))
	if err != nil {
		return Connection{}, fmt.Errorf("read %s: %w", file, err)
	}
	if len(b) > maxConnectionFile {
		return Connection{}, fmt.Errorf("%s: larger than %d bytes, not a connection file", file, maxConnectionFile)
	}
	var c Connection
	if err := json.Unmarshal(b, &c); err != nil {
		return Connection{}, fmt.Errorf("%s: not a connection file: %w", file, err)
	}
	if c.Transport == "" || (c.Transport == "tcp" && c.ShellPort <= 0) {
		return Connection{}, fmt.Errorf("%s: not a connection file (no transport or shell port)", file)
	}
	return c, nil
}

// KernelID identifies the kernel a connection file belongs to, the same
// for every process of that kernel: Jupyter starts a new process for each
// restart with the same file, and clients other than a server (nbclient, a
// bare KernelManager, editors) name the file as they like, often a fresh
// temporary name. A server's `kernel-<id>.json` gives the server's id, so
// `kernels` joins it with the server's list. Any other file is identified by
// what stays while its kernel restarts: its absolute path and the HMAC key
// inside it (a reused temporary name with a new key is another kernel), as
// "cf-" and 16 hex digits; conn is nil where the file could not be read (a
// kernel that writes its own file at start), and then the path alone counts.
func KernelID(file string, conn *Connection) string {
	if id, ok := attrib.ServerKernelID(file); ok {
		return id
	}
	if abs, err := filepath.Abs(file); err == nil {
		file = abs
	}
	h := sha256.New()
	h.Write([]byte(file))
	if conn != nil {
		h.Write([]byte{0})
		h.Write([]byte(conn.Key))
	}
	return "cf-" + hex.EncodeToString(h.Sum(nil))[:16]
}
