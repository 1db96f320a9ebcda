package snapshot

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
)

// memory_viz's page (torch.cuda._memory_viz: _format_viz, what
// trace_plot and segment_plot write from torch 2.2 on) embeds the snapshot
// as its pickle, base64, in a JSON list of files:
//
//	const local_files = [{"name": "snapshot.pickle", "base64": "gASV..."}]
//
// The pickle is decoded as any other; nothing of the page is run.

// htmlScan bounds how far into a page the embedded file is looked for: the
// template puts it within its first kilobyte.
const htmlScan = 64 << 10

// isHTML is whether a file's first bytes (after blanks) open a page.
func isHTML(head []byte) bool {
	head = bytes.TrimLeft(head, " \t\r\n\ufeff")
	return len(head) > 0 && head[0] == '<'
}

// decodeHTML reads the snapshot a memory_viz page embeds.
func decodeHTML(r *bufio.Reader, lim Limits, progress func(int64)) (*Snapshot, error) {
	head, _ := r.Peek(htmlScan)
	at := bytes.Index(head, []byte(`"base64"`))
	if at < 0 {
		return nil, fmt.Errorf("%w: an HTML page with no snapshot embedded in it (memory_viz's pages from torch 2.2 on embed the pickle; older ones only what they plot): read the pickle _dump_snapshot wrote", ErrNotSnapshot)
	}
	rest := bytes.TrimLeft(head[at+len(`"base64"`):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return nil, fmt.Errorf("%w: an HTML page whose \"base64\" holds no embedded file", ErrNotSnapshot)
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	if len(rest) == 0 || rest[0] != '"' {
		return nil, fmt.Errorf("%w: an HTML page whose \"base64\" holds no embedded file", ErrNotSnapshot)
	}
	if _, err := r.Discard(len(head) - len(rest) + 1); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	body := &untilQuote{r: r}
	s, err := Decode(base64.NewDecoder(base64.StdEncoding, body), lim, progress)
	if err != nil {
		return nil, fmt.Errorf("memory_viz page's embedded snapshot: %w", err)
	}
	return s, nil
}

// untilQuote reads r up to (not including) the next '"'.
type untilQuote struct {
	r    *bufio.Reader
	done bool
}

func (u *untilQuote) Read(p []byte) (int, error) {
	if u.done {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) {
		c, err := u.r.ReadByte()
		if err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
		if c == '"' {
			u.done = true
			break
		}
		p[n] = c
		n++
	}
	if n == 0 && u.done {
		return 0, io.EOF
	}
	return n, nil
}
