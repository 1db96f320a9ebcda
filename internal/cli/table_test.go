package cli

import "testing"

// TestTruncateCells: a value cut to n terminal cells ends in "…" within
// them; a wide character that would cross the edge goes whole; an escape
// sequence takes no cells and is never cut in two.
func TestTruncateCells(t *testing.T) {
	const red, reset = "\x1b[31m", "\x1b[0m"
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"python train.py", 20, "python train.py"},
		{"python train.py", 15, "python train.py"},
		{"python train.py", 8, "python …"},
		{"python", 1, "…"},
		{"python", 0, ""},
		{"python", -3, ""},
		{"数据加载器", 10, "数据加载器"},
		{"数据加载器", 6, "数据…"},
		{"数据加载器", 5, "数据…"},
		{red + "python train.py" + reset, 15, red + "python train.py" + reset},
		{red + "python train.py" + reset, 8, red + "python " + reset + "…"},
	}
	for _, tt := range tests {
		got := truncateCells(tt.s, tt.n)
		if got != tt.want {
			t.Errorf("truncateCells(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
		if tt.n > 0 && cellWidth(got) > tt.n {
			t.Errorf("truncateCells(%q, %d) = %q takes %d cells", tt.s, tt.n, got, cellWidth(got))
		}
	}
}
