package cli

import "testing"

// TestTruncateCells: a value cut to n terminal cells ends in "…" within
// them; a wide character that would cross the edge goes whole; an escape
// sequence takes no cells and is never cut in two.
func TestTruncateCells(t *testing.T) {
	const red, reset = "\x1b[31m", "\x1b[0m"
	tests := []struct {
		why  string
		s    string
		n    int
		want string
	}{
		{"room to spare", "python train.py", 20, "python train.py"},
		{"an exact fit", "python train.py", 15, "python train.py"},
		{"cut", "python train.py", 8, "python …"},
		{"room for the ellipsis alone", "python", 1, "…"},
		{"no room", "python", 0, ""},
		{"less than none", "python", -3, ""},
		{"wide characters that fit", "数据加载器", 10, "数据加载器"},
		{"wide characters cut", "数据加载器", 6, "数据…"},
		{"a wide character that would cross the edge", "数据加载器", 5, "数据…"},
		{"escapes that fit", red + "python train.py" + reset, 15, red + "python train.py" + reset},
		{"escapes cut: the reset kept", red + "python train.py" + reset, 8, red + "python " + reset + "…"},
	}
	for _, tt := range tests {
		got := truncateCells(tt.s, tt.n)
		if got != tt.want {
			t.Errorf("%s: truncateCells(%q, %d) = %q, want %q", tt.why, tt.s, tt.n, got, tt.want)
		}
		if tt.n > 0 && cellWidth(got) > tt.n {
			t.Errorf("truncateCells(%q, %d) = %q takes %d cells", tt.s, tt.n, got, cellWidth(got))
		}
	}
}
